"""hydra-submitit-launcher's SLURM launcher, with a failed job recorded as failed (prime_rl_slurm/slurm_launcher.py).

Hydra loads launchers only from the `hydra_plugins` namespace package, hence this package; the presets in
conf/hydra/launcher/ name it.
"""

"""`hydra/launcher=slurm|slurm_gpu`: hydra-submitit-launcher's SlurmLauncher, but a job whose run failed fails.

Hydra's `run_job` catches a job's exception into its JobReturn, which submitit then saved as a success: SLURM said
COMPLETED. A job that exited instead (`sys.exit`) saved nothing, and the waiting sweep learnt of it from
accounting, which submitit polls ever less often as a job ages (up to every 10 min). Here a failed return is raised
in the job: submitit saves it as the job's error, which the sweep reads within a second, and the job exits non-zero
(SLURM: FAILED). A job that is requeued still exits (submitit's own `sys.exit`) and saves nothing; its requeue
is shielded from the SIGTERM that the requeue itself sends (launcher/slurm.py `requeue_outlives_its_own_kill`).
"""

from prime_rl.launcher.slurm import requeue_outlives_its_own_kill

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher
except ImportError:  # no `slurm` extra: Hydra's plugin scan must not fail (config/extras.py names the extra)
    SubmititSlurmLauncher = None

if SubmititSlurmLauncher is not None:

    class SlurmLauncher(SubmititSlurmLauncher):
        def __call__(self, *args, **kwargs):  # in the job, after submitit set its signal handlers
            requeue_outlives_its_own_kill()
            returned = super().__call__(*args, **kwargs)
            _ = returned.return_value  # raises the job's exception where it failed
            return returned

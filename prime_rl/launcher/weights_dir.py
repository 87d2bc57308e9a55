"""Where the trainer's weight exports live. Each step's export is written once and read at once by the servers of
the node, then deleted: on a shared filesystem (NFS, Lustre) that is a round trip over the network per step. A
one-node GPU job writes them to the node's own scratch instead, the dir its scheduler names; the run dir's
`weights` is then a link there, so every process finds them at the usual path."""

import hashlib
import shutil
from pathlib import Path

from prime_rl.config.layout import on_gpu
from prime_rl.config.schema import Config, num_nodes
from prime_rl.protocol.run_dir import RunDir

NODE_SCRATCH_ENVS = ("SLURM_TMPDIR", "TMPDIR")  # a job's node-local scratch, where the scheduler sets one


def weights_home(cfg: Config, env: dict[str, str]) -> Path | None:
    """launcher.weights_dir, or auto: node-local scratch for a one-node GPU job (None: the run dir itself)."""
    if cfg.launcher.weights_dir:
        return Path(cfg.launcher.weights_dir)
    if not on_gpu(cfg) or num_nodes(cfg.deployment) > 1:
        return None
    scratch = next((env[name] for name in NODE_SCRATCH_ENVS if env.get(name)), None)
    return Path(scratch) / "prime_rl_weights" if scratch else None


def link_weights(run_dir: RunDir, home: Path) -> Path:
    """Make run_dir/weights a link to a dir of this run under `home` (the run dir's exports, if any, are trimmed
    already: a fresh run has none, a resumed one drops them); returns that dir."""
    target = home / hashlib.sha256(str(run_dir.root.resolve()).encode()).hexdigest()[:16] / "weights"
    target.mkdir(parents=True, exist_ok=True)
    link = run_dir.root / "weights"
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        shutil.rmtree(link)
    link.symlink_to(target, target_is_directory=True)
    return target


def unlink_weights(run_dir: RunDir, target: Path) -> None:
    """The run is over: its exports are of no use to anyone (a resume starts from a checkpoint)."""
    shutil.rmtree(target.parent, ignore_errors=True)
    (run_dir.root / "weights").unlink(missing_ok=True)

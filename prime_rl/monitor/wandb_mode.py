"""Which W&B mode a run logs in, settled by the launcher on the machine the run runs on.

SLURM compute nodes often have no route to W&B. With an API key, `auto` would mean online, and the trainer would
crash on its first upload minutes later. So the launcher asks W&B's server once, with a short timeout, before
any process starts: `auto` falls back to offline (one warning line, and the `wandb sync` to run later); an
explicit `online` that cannot reach it is a one-line error.
"""

import os
from dataclasses import replace
from pathlib import Path

from prime_rl.config.schema import Config, WandbMode
from prime_rl.config.user_error import UserError

DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 3.0


def wandb_mode(mode: WandbMode) -> str:
    """auto: $WANDB_MODE when set, else online with an API key and offline without (`wandb sync` later)."""
    if mode != WandbMode.auto:
        return mode.value
    return os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")


def base_url() -> str:
    return os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL


def reachable(url: str) -> bool:
    """Any HTTP answer counts: only whether the server can be reached matters here."""
    import httpx  # the launcher's probe alone: the trainer, which imports this module, runs without httpx

    try:
        httpx.get(url, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return False
    return True


class WandbUnreachable(UserError, RuntimeError):
    """W&B's server cannot be reached and the run asked for online logging."""


def settle_wandb_mode(cfg: Config, run_dir: Path, warn) -> Config:
    """The config with the mode the run will log in; raises WandbUnreachable for an online run with no route."""
    mode = wandb_mode(cfg.monitor.wandb.mode)
    if mode != "online" or reachable(base_url()):
        return cfg
    if cfg.monitor.wandb.mode == WandbMode.online:
        raise WandbUnreachable(
            f"W&B unreachable [monitor.wandb.mode]: no answer from {base_url()} within {PROBE_TIMEOUT_S:g} s; "
            "fix: set monitor.wandb.mode=offline and `wandb sync` later, or check WANDB_BASE_URL and the network"
        )
    warn(
        f"warning: W&B unreachable at {base_url()}: this run logs offline; "
        f"upload it later with `wandb sync {run_dir}/wandb/offline-run-*`"
    )
    return replace(cfg, monitor=replace(cfg.monitor, wandb=replace(cfg.monitor.wandb, mode=WandbMode.offline)))

"""The optional extras of setup.cfg: a feature whose package is not installed is one line naming the extra that
installs it, before anything starts."""

import importlib
from types import ModuleType

from prime_rl.config.user_error import UserError

SLURM_PLUGIN = "submitit_slurm"  # hydra-submitit-launcher's launcher config, under conf/hydra/launcher/slurm*.yaml


def import_extra(module: str, extra: str, feature: str) -> ModuleType:
    """`module`, or a UserError saying that `feature` needs `extra`."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UserError(missing_extra(feature, extra, e.name or module)) from e


def missing_extra(feature: str, extra: str, missing: str) -> str:
    return f"{feature} needs the {extra} extra ({missing} does not import); fix: pip install -e '.[{extra}]'"

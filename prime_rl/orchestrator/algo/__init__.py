"""Each training mode's part of an orchestrator step, one file per built-in mode (a researcher's own lives in their
module): `algorithm` makes the run's from its modes' `Mode.algorithm`."""

from prime_rl.config.modes import Mode, import_object, mode_config, run_modes
from prime_rl.config.schema import Config
from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.algo.per_source import PerSource


def algorithm(cfg: Config) -> Algorithm:
    """The run's mode's part, or, where a mix's sources train with several modes, each prompt routed to its own."""
    modes = run_modes(cfg)
    if len(modes) == 1:
        return part(cfg, modes[0])
    return PerSource({mode.name: part(cfg, mode) for mode in modes})


def part(cfg: Config, mode: Mode) -> Algorithm:
    """A new instance of the mode's orchestrator part, built with the mode and its typed knobs."""
    return import_object(mode.algorithm, "training_mode", "orchestrator part")(mode, mode_config(cfg, mode))

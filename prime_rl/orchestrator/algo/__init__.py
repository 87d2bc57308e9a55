"""Each training mode's part of an orchestrator step, one file per built-in mode (a researcher's own lives in their
module): `algorithm` makes the run's from its modes' `Mode.algorithm`."""

from prime_rl.config.modes import Mode, import_object, run_modes
from prime_rl.config.schema import Config
from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.algo.per_source import PerSource


def algorithm(cfg: Config) -> Algorithm:
    """The run's mode's part, or, where a mix's sources train with several modes, each prompt routed to its own."""
    modes = run_modes(cfg)
    if len(modes) == 1:
        return part(modes[0])
    return PerSource({mode.name: part(mode) for mode in modes})


def part(mode: Mode) -> Algorithm:
    """A new instance of the mode's orchestrator part."""
    return import_object(mode.algorithm, "training_mode", "orchestrator part")()

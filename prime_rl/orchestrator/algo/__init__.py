"""Each training mode's part of an orchestrator step, one file per mode; `algorithm` picks the run's."""

from prime_rl.config.modes import run_modes
from prime_rl.config.schema import Config, TrainingMode
from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.algo.opd import OPD
from prime_rl.orchestrator.algo.per_source import PerSource
from prime_rl.orchestrator.algo.rl import RL
from prime_rl.orchestrator.algo.sft import SFT

ALGORITHMS: dict[TrainingMode, type[Algorithm]] = {TrainingMode.rl: RL, TrainingMode.opd: OPD, TrainingMode.sft: SFT}


def algorithm(cfg: Config) -> Algorithm:
    """The run's mode's part, or, where a mix's sources train with several modes, each prompt routed to its own."""
    modes = [mode.name for mode in run_modes(cfg)]
    if len(modes) == 1:
        return ALGORITHMS[modes[0]]()
    return PerSource({mode.value: ALGORITHMS[mode]() for mode in modes})

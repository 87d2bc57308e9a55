"""Each training mode's part of an orchestrator step, one file per mode; `algorithm` picks the run's."""

from prime_rl.config.schema import TrainingMode
from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.algo.opd import OPD
from prime_rl.orchestrator.algo.rl import RL
from prime_rl.orchestrator.algo.sft import SFT

ALGORITHMS: dict[TrainingMode, type[Algorithm]] = {TrainingMode.rl: RL, TrainingMode.opd: OPD, TrainingMode.sft: SFT}


def algorithm(mode: TrainingMode) -> Algorithm:
    return ALGORITHMS[mode]()

"""Several tasks in one run (`task=mix`, sources in `task.mix`): each step draws its prompts' sources by weight,
each source keeps its own verifier (and may set its own training mode), and the metrics carry each source's label
(reward/<label>, eval/<label>/…). The registry passes in how a source is loaded and scored, so this module imports
no loader."""

import functools
import itertools
from collections.abc import Callable
from dataclasses import replace

from prime_rl.config.schema import TaskConfig, TaskSourceConfig
from prime_rl.config.sources import mix_sources
from prime_rl.config.user_error import ConfigError
from prime_rl.tasks.task import Example, Task


def load_mix(cfg: TaskConfig, load_source: Callable[[TaskSourceConfig], Task]) -> Task:
    """The sources' splits, each example labelled with its source, scored by its source's verifier."""
    parts = []
    for i, (label, src) in enumerate(mix_sources(cfg)):
        try:
            parts.append((label, src.weight, load_source(src)))
        except ConfigError as e:
            raise ConfigError([k.replace("task.", f"task.mix[{i}].", 1) for k in e.keys], e.problem, e.fix) from e
    modes = {label: src.mode for label, src in mix_sources(cfg)}
    train = [replace(ex, source=label, mode=modes[label]) for label, _, part in parts for ex in part.train]
    # interleaved, so the first orchestrator.eval.num_examples cover every source alike
    labelled_evals = [[replace(ex, source=label, mode=modes[label]) for ex in part.eval] for label, _, part in parts]
    evals = [ex for row in itertools.zip_longest(*labelled_evals) for ex in row if ex is not None]
    verify = functools.partial(score_source, {label: part.verify for label, _, part in parts})
    return Task("mix", train, evals, verify, weights={label: weight for label, weight, _ in parts})


def mix_scorer(cfg: TaskConfig, source_scorer: Callable[[TaskSourceConfig], Callable]) -> Callable:
    """(completion, example) -> the reward of the example's source's scorer, each built by `source_scorer`."""
    return functools.partial(score_source, {label: source_scorer(src) for label, src in mix_sources(cfg)})


def score_source(scorers: dict[str, Callable], completion: str, example: Example) -> float:
    return scorers[example.source](completion, example)

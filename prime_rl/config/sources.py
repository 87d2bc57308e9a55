"""The sources of a task mix as the config names them: each one's label (its metrics' name, and how a sample says
where its prompt came from), the loss weights it trains with (task.mix[i].adv_tau / teacher_tau over
trainer.loss's) and the samples of each of its prompts (task.mix[i].rollouts_per_example over the orchestrator's)."""

from dataclasses import replace
from pathlib import Path

from prime_rl.config.schema import MIX, Config, LossConfig, TaskConfig, TaskSourceConfig


def mix_sources(cfg: TaskConfig) -> list[tuple[str, TaskSourceConfig]]:
    """Each source with its label: its `label`, else its dataset, file or task name (numbered when repeated)."""
    labelled, seen = [], {}
    for src in cfg.mix:
        base = source_label(src)
        seen[base] = seen.get(base, 0) + 1
        labelled.append((base if seen[base] == 1 else f"{base}-{seen[base]}", src))
    return labelled


def source_label(src: TaskSourceConfig) -> str:
    """A source's name in metrics and results: its `label`, else its dataset, file or task name."""
    return src.label or src.dataset or src.env or (Path(src.path).stem if src.path else None) or src.name


def source_loss(loss: LossConfig, src: TaskSourceConfig) -> LossConfig:
    """trainer.loss with the source's own adv_tau and teacher_tau where it sets them."""
    adv_tau = loss.adv_tau if src.adv_tau is None else src.adv_tau
    teacher_tau = loss.teacher_tau if src.teacher_tau is None else src.teacher_tau
    return replace(loss, adv_tau=adv_tau, teacher_tau=teacher_tau)


def source_losses(cfg: Config) -> dict[str, LossConfig]:
    """By source label, the loss weights each source of a mix trains with ("" outside a mix: trainer.loss)."""
    if cfg.task.name != MIX:
        return {"": cfg.trainer.loss}
    return {label: source_loss(cfg.trainer.loss, src) for label, src in mix_sources(cfg.task)}


def rollouts_of(cfg: Config, src: TaskSourceConfig) -> int:
    """The samples a step makes of each prompt of the source: its own rollouts_per_example, else the orchestrator's."""
    return src.rollouts_per_example or cfg.orchestrator.rollouts_per_example


def rollouts_key(cfg: Config, index: int, src: TaskSourceConfig) -> str:
    """The key that sets the samples per prompt of the index-th source: its own, else the orchestrator's."""
    own = cfg.task.name == MIX and src.rollouts_per_example is not None
    return f"task.mix[{index}].rollouts_per_example" if own else "orchestrator.rollouts_per_example"


def source_on_policy(cfg: Config, default: float) -> dict[str, float]:
    """By source label, the share of its prompts the student samples (opd; `default`: modes.opd.on_policy)."""
    if cfg.task.name != MIX:
        return {"": default}
    return {label: default if src.on_policy is None else src.on_policy for label, src in mix_sources(cfg.task)}


def source_rollouts(cfg: Config) -> dict[str, int]:
    """By source label, the samples a step makes of each of its prompts ("" outside a mix: the orchestrator's)."""
    if cfg.task.name != MIX:
        return {"": cfg.orchestrator.rollouts_per_example}
    return {label: rollouts_of(cfg, src) for label, src in mix_sources(cfg.task)}

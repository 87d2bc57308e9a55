"""What a distilled signal is made of beyond the mode's facts: a self-teacher's weights (modes.<mode>.teacher) and
fixed completions that no sampler wrote (GKD's off-policy share, modes.opd.on_policy)."""

from prime_rl.config.layout import pushes_weights
from prime_rl.config.modes import (
    OpdConfig,
    SelfTeacher,
    distill_top_k,
    mode_config,
    modes_with,
    run_modes,
    self_teachers_of,
    source_modes,
)
from prime_rl.config.schema import EPISODIC, MIX, Config
from prime_rl.config.user_error import check


def self_teacher(cfg: Config, _: int) -> None:
    """A lagged self-teacher without LoRA is loaded from the trainer's exported files, which a weight push leaves
    empty."""
    for mode in run_modes(cfg):
        if SelfTeacher.lagged in self_teachers_of(cfg, mode) and not cfg.trainer.lora.enabled:
            check(
                not pushes_weights(cfg),
                [f"modes.{mode.name}.teacher", "inference.weight_transfer"],
                "a lagged self-teacher without LoRA is loaded from the trainer's exported weights, and "
                f"inference.weight_transfer={cfg.inference.weight_transfer.value} pushes them instead of exporting",
                f"set inference.weight_transfer=files, train with lora=on, or set modes.{mode.name}.teacher=initial",
            )


def off_policy(cfg: Config, _: int) -> None:
    """GKD's off-policy share (modes.opd.on_policy, a mix source's on_policy): fixed completions have no sampler, so
    they learn from the teacher's top k alone; they are single-turn prompts' (an episode's turns come from its
    environment); and the difficulty filter would judge every prompt a fixed answer solves."""
    for i, (key, src, mode) in enumerate(source_modes(cfg)):
        knobs = mode_config(cfg, mode)
        at = f"task.mix[{i}].on_policy" if cfg.task.name == MIX else f"modes.{mode.name}.on_policy"
        check(
            src.on_policy is None or isinstance(knobs, OpdConfig),
            [at, key],
            f"{at} is the share of a source's prompts the student samples in a mode with fixed completions, and "
            f"this source trains in {mode.name}",
            f"drop {at}, or set {key}={modes_with(lambda m: m.config is OpdConfig)}",
        )
        share = src.on_policy if src.on_policy is not None else getattr(knobs, "on_policy", 1.0)
        if share >= 1:
            continue
        where = at if src.on_policy is not None else f"modes.{mode.name}.on_policy"
        check(
            distill_top_k(cfg) > 0,
            [where, "trainer.loss.distill"],
            "fixed completions have no sampler's logprobs: they learn from the teacher's top k alone",
            "set trainer.loss.distill=topk (and distill_kl, e.g. jsd), or the share to 1",
        )
        check(
            src.name not in EPISODIC,
            [where, "task.name" if cfg.task.name != MIX else f"task.mix[{i}].name"],
            f"fixed completions are single replies, and {src.name} plays episodes",
            "set the share to 1 for this source",
        )
        check(
            not cfg.orchestrator.difficulty.enabled,
            [where, "orchestrator.difficulty.enabled"],
            "the difficulty filter would judge a prompt by its fixed completion, which solves it",
            "set orchestrator.difficulty.enabled=false, or the share to 1",
        )

"""Every cross-field rule of a run that reads nothing but the config: no env var, file, network or task build
(those are prime_rl/launcher/preflight/, which runs these first). docs/modes.md, "Modes and their rules";
docs/architecture.md, "Validation". One module per concern: the knobs' values, the training modes, what a
distilled signal is made of, the teachers, the deployment. A knob's own range is a bound on its field in schema.py
(config/ranges.py checks them all); a rule over several knobs is a check() of its own. A broken rule raises
ConfigError, whose one-line message names the offending keys and the fix.
"""

from prime_rl.config.rules.deployment import (
    check_gpu_count,
    colocated,
    gpu_counts,
    lora_dropout,
    node_ports,
    parallelism,
    standing_server,
    weight_transfer,
)
from prime_rl.config.rules.distillation import off_policy, self_teacher
from prime_rl.config.rules.judge import judge
from prime_rl.config.rules.teachers import named_teachers, served_reference, teacher_settings, teacher_tool_parser
from prime_rl.config.rules.training_modes import (
    advantages,
    mode_knobs,
    prompt_filters,
    rewards,
    run_teacher,
    sampled_policy,
    scorer_term,
    source_mode,
    source_teachers,
    source_weights,
    student_sample_shaping,
)
from prime_rl.config.rules.values import batched_tokens, eval_samples, pairs, ranges
from prime_rl.config.schema import Config

__all__ = ["check_gpu_count", "check_rules"]

# in this order: the first broken rule is the one reported
RULES = (
    mode_knobs,
    self_teacher,
    ranges,
    pairs,
    batched_tokens,
    eval_samples,
    source_weights,
    judge,
    named_teachers,
    source_mode,
    source_teachers,
    sampled_policy,
    run_teacher,
    scorer_term,
    off_policy,
    rewards,
    student_sample_shaping,
    prompt_filters,
    advantages,
    teacher_tool_parser,
    teacher_settings,
    lora_dropout,
    served_reference,
    node_ports,
    colocated,
    weight_transfer,
    standing_server,
    gpu_counts,
    parallelism,
)


def check_rules(cfg: Config, visible_gpus: int) -> None:
    """Raise ConfigError on the first broken rule. `visible_gpus`: GPUs the job will see."""
    for rule in RULES:
        rule(cfg, visible_gpus)

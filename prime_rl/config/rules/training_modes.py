"""What each source's mode implies for the rest of the config, stated from the modes' facts (config/modes.py),
never from their names: a message names the modes that have the fact it needs (`modes_with`)."""

from prime_rl.config.modes import (
    mode_config,
    mode_named,
    modes_with,
    run_modes,
    source_modes,
)
from prime_rl.config.schema import (
    MIX,
    Config,
    LossConfig,
    RatioLevel,
    TeacherKind,
    scorer_knobs,
)
from prime_rl.config.sources import rollouts_key, rollouts_of, source_loss
from prime_rl.config.user_error import check, literal


def mode_knobs(cfg: Config, _: int) -> None:
    """Every mode the run names exists (a built-in name, or a Mode at an import path), and modes.<name> holds the
    knobs of the run's own modes only, each of the mode's type and range."""
    modes = {mode.name: mode for mode in run_modes(cfg)}
    for name in cfg.modes:
        mode = modes.get(name)
        check(
            mode is not None and mode.config is not None,
            [f"modes.{name}"],
            f"{name} is none of this run's modes with knobs of their own ({', '.join(modes)})"
            if mode is None
            else f"{name} has no knobs of its own",
            f"drop modes.{name}" + ("" if mode else ", or train with it (training_mode or task.mix[i].mode)"),
        )
    for mode in modes.values():
        if mode.config is not None:
            mode_config(cfg, mode)


def source_mode(cfg: Config, _: int) -> None:
    """A source's own mode is set in a mix only."""
    check(
        cfg.task.mode is None,
        ["task.mode"],
        f"task.mode={cfg.task.mode} sets the mode of a source of task.mix, and this task is {cfg.task.name}",
        f"set training_mode={cfg.task.mode} instead",
    )


def source_teachers(cfg: Config, _: int) -> None:
    """Each source whose mode learns from a teacher has one (the run's, or a named one of its own)."""
    for key, src, mode in source_modes(cfg):
        check(
            cfg.teacher.kind != TeacherKind.none or not mode.teacher or src.teacher is not None,
            [key, "teacher"],
            f"{mode.name} needs a teacher" + ("" if key == "training_mode" else f" ({key})"),
            "add teacher=local_vllm or teacher=external",
        )


def sampled_policy(cfg: Config, _: int) -> None:
    """A mode trained on the student's samples trains the policy that sampled: the trainer reproduces its temperature,
    not a truncation."""
    student = [m for m in run_modes(cfg) if m.trains_sampled_policy]
    if not student:
        return
    s, mode = cfg.orchestrator.sampling, student[0].name
    check(
        s.temperature > 0,
        ["orchestrator.sampling.temperature", "training_mode"],
        f"{mode} trains on sampled rollouts; at temperature 0 every rollout of a prompt is the same",
        "use e.g. orchestrator.sampling.temperature=1.0 (greedy evaluation: orchestrator.eval.temperature=0)",
    )
    check(
        s.top_p == 1,
        ["orchestrator.sampling.top_p", "training_mode"],
        f"top_p={s.top_p} truncates the sampling policy, which {mode} training does not reproduce",
        "set orchestrator.sampling.top_p=1.0 (lower the temperature instead)",
    )


def run_teacher(cfg: Config, _: int) -> None:
    """The run's teacher teaches a source: one of its modes learns from a teacher, and not every such source names
    its own."""
    sources, teacher = source_modes(cfg), cfg.teacher.kind
    check(
        teacher == TeacherKind.none or any(m.teacher for m in run_modes(cfg)),
        [*mode_keys(cfg), "teacher"],
        f"{mode_names(cfg)} takes no teacher, got teacher={teacher.value}",
        f"use teacher=none, or training_mode={modes_with(lambda m: m.teacher)} to learn from a teacher",
    )
    check(
        teacher == TeacherKind.none or any(mode.teacher and src.teacher is None for _, src, mode in sources),
        ["teacher", "task.mix"],
        f"every source that learns from a teacher names one of `teachers`, so teacher={teacher.value} teaches none",
        "use teacher=none, or let a source learn from it (drop its task.mix[i].teacher)",
    )


def scorer_term(cfg: Config, _: int) -> None:
    """Where a mode scores the student's tokens, its term has a weight (teacher_tau > 0); where none does, the term's
    knobs keep their defaults (a value set there would do nothing)."""
    loss = cfg.trainer.loss
    # the sources whose tokens are scored that take trainer.loss.teacher_tau (a source's own: source_weights)
    scored = [mode for _, src, mode in source_modes(cfg) if mode.scores_tokens and src.teacher_tau is None]
    if scored:
        check(
            loss.teacher_tau > 0,
            ["trainer.loss.teacher_tau"],
            f"{scored[0].name} scores the student's tokens, so it needs teacher_tau > 0",
            "set trainer.loss.teacher_tau=1.0",
        )
    if any(m.scores_tokens for m in run_modes(cfg)):
        return
    scorers, names, defaults = modes_with(lambda m: m.scores_tokens), mode_names(cfg), LossConfig()
    for knob in scorer_knobs():
        value, default = getattr(loss, knob), getattr(defaults, knob)
        check(
            value == default,
            [f"trainer.loss.{knob}", *mode_keys(cfg)],
            f"{knob}={literal(value)} shapes the scorer's term of {scorers}, and this run trains with {names}",
            f"drop it (its default: {literal(default)}), or train with training_mode={scorers}",
        )


def rewards(cfg: Config, _: int) -> None:
    """A mode that learns from rewards has them computed."""
    for key, _, mode in source_modes(cfg):
        check(
            cfg.orchestrator.verification.enabled or not mode.needs_rewards,
            ["orchestrator.verification.enabled", key],
            f"{mode.name} learns from rewards, so verification must be on",
            "set orchestrator.verification.enabled=true",
        )


def student_sample_shaping(cfg: Config, _: int) -> None:
    """A sequence-level ratio and length shaping act on the student's own samples: a run of teacher-written ones only
    has none."""
    if any(m.trains_sampled_policy for m in run_modes(cfg)):
        return
    keys, names, length = mode_keys(cfg), mode_names(cfg), cfg.orchestrator.length
    check(
        cfg.trainer.loss.ratio_level == RatioLevel.token,
        ["trainer.loss.ratio_level", *keys],
        f"a sequence-level importance ratio weighs the student's own samples, and {names} trains on the teacher's",
        "set trainer.loss.ratio_level=token",
    )
    check(
        not (length.overlong_buffer or length.mask_truncated),
        ["orchestrator.length", *keys],
        f"length shaping applies to the student's own replies, and {names} trains on the teacher's",
        "set orchestrator.length.overlong_buffer=0 and orchestrator.length.mask_truncated=false",
    )


def prompt_filters(cfg: Config, _: int) -> None:
    """The prompt filters act on whole steps: every source's groups must be ones they can judge."""
    o = cfg.orchestrator
    for i, (key, src, mode) in enumerate(source_modes(cfg)):
        n_key = rollouts_key(cfg, i, src)
        check(
            not o.difficulty.enabled or rollouts_of(cfg, src) > 1,
            ["orchestrator.difficulty.enabled", n_key],
            "the difficulty filter judges a prompt by its group's rewards, and a group of one sample always passed "
            "or always failed",
            f"set {n_key}=2 or more, or orchestrator.difficulty.enabled=false",
        )
        check(
            not o.dynamic_sampling.enabled or (mode.advantages and not mode.scores_tokens),
            ["orchestrator.dynamic_sampling.enabled", key],
            f"dynamic sampling drops groups without a signal, and every {mode.name} group has one"
            + (f" (its {mode.scorer.value} scores each token)" if mode.scores_tokens else " (the teacher's answers)"),
            f"use it with {key}={modes_with(lambda m: m.advantages and not m.scores_tokens)}, "
            "or set orchestrator.dynamic_sampling.enabled=false",
        )
        check(
            not o.difficulty.enabled or mode.trains_sampled_policy,
            ["orchestrator.difficulty.enabled", key],
            f"the difficulty filter judges prompts by the student's own rewards, and {mode.name} trains on the "
            "teacher's",
            f"use it with {key}={modes_with(lambda m: m.trains_sampled_policy)}, "
            "or set orchestrator.difficulty.enabled=false",
        )
    check(
        o.verification.enabled or not o.difficulty.enabled,
        ["orchestrator.difficulty.enabled", "orchestrator.verification.enabled"],
        "the difficulty filter judges prompts by their rewards, but verification is off",
        "set orchestrator.verification.enabled=true, or orchestrator.difficulty.enabled=false",
    )


def advantages(cfg: Config, _: int) -> None:
    """GRPO advantages need rewards, and groups of two samples or more."""
    sources, loss = source_modes(cfg), cfg.trainer.loss
    # the largest adv_tau a sample with advantages trains with (a mix source's own, or trainer.loss's)
    adv_tau = max((source_loss(loss, src).adv_tau for _, src, mode in sources if mode.advantages), default=0)
    if any(m.advantages for m in run_modes(cfg)):
        check(
            cfg.orchestrator.verification.enabled or adv_tau == 0,
            ["trainer.loss.adv_tau", "orchestrator.verification.enabled"],
            f"adv_tau={adv_tau} needs rewards but verification is off",
            "set trainer.loss.adv_tau=0 (pure distillation) or orchestrator.verification.enabled=true",
        )
    for i, (_, src, mode) in enumerate(sources):
        if not mode.advantages:
            continue
        at = f"task.mix[{i}]" if cfg.task.name == MIX else "task"  # where the source sets its own
        tau, n = source_loss(loss, src).adv_tau, rollouts_of(cfg, src)
        tau_key = f"{at}.adv_tau" if src.adv_tau is not None else "trainer.loss.adv_tau"
        n_key = rollouts_key(cfg, i, src)
        check(
            tau == 0 or n > 1,
            [tau_key, n_key],
            f"adv_tau={tau} weighs GRPO advantages, which are always 0 with one rollout per prompt",
            f"set {n_key}=2 or more, or {tau_key}=0 (pure distillation)",
        )


def mode_keys(cfg: Config) -> list[str]:
    """The keys that set the run's modes (training_mode, task.mix[i].mode), as a message names them."""
    return sorted({key for key, _, _ in source_modes(cfg)})


def mode_names(cfg: Config) -> str:
    return "|".join(m.name for m in run_modes(cfg))


def source_weights(cfg: Config, _: int) -> None:
    """A mix source's own adv_tau, teacher_tau and rollouts_per_example: only where its mode has that term, and what
    the term needs."""
    task = cfg.task
    check(
        task.adv_tau is None and task.teacher_tau is None,
        ["task.adv_tau", "task.teacher_tau"],
        f"these set the loss weights of a source of task.mix, and this task is {task.name}",
        "set trainer.loss.adv_tau and trainer.loss.teacher_tau instead",
    )
    check(
        task.rollouts_per_example is None,
        ["task.rollouts_per_example"],
        f"it sets the samples per prompt of a source of task.mix, and this task is {task.name}",
        "set orchestrator.rollouts_per_example instead",
    )
    for i, src in enumerate(task.mix if task.name == MIX else []):
        at = f"task.mix[{i}]"
        mode = mode_named(src.mode, f"{at}.mode") if src.mode else mode_named(cfg.training_mode)
        if src.teacher_tau is not None:
            scorers = modes_with(lambda m: m.scores_tokens)
            check(
                mode.scores_tokens,
                [f"{at}.teacher_tau", f"{at}.mode"],
                f"teacher_tau weighs the scorer's term of {scorers} samples, and this source trains in {mode.name}",
                f"drop {at}.teacher_tau, or set {at}.mode={scorers}",
            )
            check(
                src.teacher_tau > 0,
                [f"{at}.teacher_tau"],
                f"{mode.name} scores the student's tokens, so it needs teacher_tau > 0",
                f"set {at}.teacher_tau=1.0",
            )
        if src.adv_tau is not None:
            advantaged = modes_with(lambda m: m.advantages)
            check(
                mode.advantages,
                [f"{at}.adv_tau", f"{at}.mode"],
                f"adv_tau weighs the advantages of {advantaged} samples, and this source trains in {mode.name}",
                f"drop {at}.adv_tau, or set {at}.mode={advantaged}",
            )

"""The judge: the model whose server gives the rewards of the sources with task.verifier=judge."""

from prime_rl.config.judge import JUDGE, RUBRIC_FIELDS, judge_teacher, judged_sources, rubric_fields
from prime_rl.config.schema import Config, TeacherKind, Verdict
from prime_rl.config.teachers import DEFAULT, teacher_config, teacher_key, teaches
from prime_rl.config.user_error import check

ADD_JUDGE = "add one: '++teachers={judge:{kind:local_vllm,model:<dir>}}' judge.teacher=judge"


def judge(cfg: Config, _: int) -> None:
    """A judged source has a judge that can read its rubric, and its rewards are computed; judge.teacher names
    the judge of judged sources only."""
    name, j = judge_teacher(cfg), cfg.judge
    for i, t in enumerate(cfg.orchestrator.eval.tasks):
        check(
            t.verifier != JUDGE or name is not None,
            [f"orchestrator.eval.tasks[{i}].verifier", "task.verifier"],
            "an eval task is judged by the run's judge, and no source of the run's task is judged",
            "judge a source of the run's task too (task.verifier=judge, with judge.teacher), or verify it by code",
        )
    if name is None:
        check(
            j.teacher is None,
            ["judge.teacher", "task.verifier"],
            "judge.teacher names the judge of the sources with task.verifier=judge, and no source has it",
            "set task.verifier=judge (task.mix[i].verifier in a mix), or drop judge.teacher",
        )
        return
    keys = [key for _, key, _ in judged_sources(cfg)]
    if name == DEFAULT:
        check(
            cfg.teacher.kind != TeacherKind.none,
            ["judge.teacher", *keys],
            "a judged source needs a judge's server, and this run has no teacher",
            ADD_JUDGE,
        )
    else:
        check(
            name in cfg.teachers,
            ["judge.teacher"],
            f"{name!r} is none of the named teachers ({', '.join(cfg.teachers) or 'there are none'})",
            ADD_JUDGE.replace("judge", name),
        )
    t = teacher_config(cfg, name) if name == DEFAULT or name in cfg.teachers else None
    check(
        t is None
        or t.model != "tiny"
        or t.warm_start.task is not None
        or teaches(cfg, name, lambda mode: mode.teacher),
        [f"{teacher_key(name)}.warm_start.task"],
        "the built-in judge teaches no source, so it has nothing to warm-start on",
        f"set {teacher_key(name)}.warm_start.task=judge (it learns to judge reverse's replies)",
    )
    check(
        cfg.orchestrator.verification.enabled,
        ["orchestrator.verification.enabled", *keys],
        "the judge gives rewards, and reward computation is off",
        "set orchestrator.verification.enabled=true",
    )
    if j.verdict != Verdict.reward_model:
        rubric(j.rubric)
        return
    check(
        not teaches(cfg, name, lambda mode: mode.teacher),
        ["judge.verdict", "judge.teacher"],
        f"a reward model only judges, and {teacher_key(name)} also teaches",
        "give the reward model a teachers entry of its own and set judge.teacher to it",
    )


def rubric(text: str) -> None:
    try:
        fields = rubric_fields(text)
    except ValueError as e:
        fields = [f"(unreadable: {e})"]
    unknown = sorted(set(fields) - set(RUBRIC_FIELDS))
    check(
        not unknown,
        ["judge.rubric"],
        f"the rubric names {', '.join(unknown)}, which the judge is never given",
        "name only {prompt} {completion} {answer}; write a literal brace as {{ or }}",
    )
    check(
        "completion" in fields,
        ["judge.rubric"],
        "the rubric never shows the judge the reply it judges",
        "put {completion} in judge.rubric",
    )

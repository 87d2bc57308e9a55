"""Several teachers in one run: `teacher` (named "", the one a source gets when it names none) and the named entries
of `teachers`, each local_vllm (a server of its own) or external, each teaching the task.mix sources that name it.

Everything that serves, checks or asks a teacher reads `cfg.teacher`; for a named one it reads the run's config as
that teacher sees it (`teacher_view`): its TeacherConfig as `teacher`, and as `task` a mix of the sources it
teaches, so a built-in teacher is warm-started on its own sources and a check names only the modes it serves.

The reference of `trainer.loss.kl_ref_from=vllm` is one more local teacher, named REFERENCE, that teaches no source:
the student's own model as the run starts (its view's task is the run's, so a built-in student's build is its
model dir too), served so the orchestrator can score every sample's tokens with it."""

from collections.abc import Callable, Iterator
from dataclasses import replace

from prime_rl.config.modes import Mode, SelfTeacher, self_teachers, source_modes
from prime_rl.config.schema import MIX, Config, ReferenceSource, TaskConfig, TeacherConfig, TeacherKind
from prime_rl.config.sources import mix_sources
from prime_rl.config.user_error import keys_renamed

DEFAULT = ""  # the name of `teacher` among the run's teachers
SERVER_ROLE = "teacher_inference"  # the default local teacher's server role; a named one's is SERVER_ROLE_<name>
MULTI_NODE_NAMED_LOCAL_TEACHERS = 5  # the ports a multi-node job keeps for named local teachers (launcher/multinode.py)
REFERENCE = "reference"  # the served reference policy of trainer.loss.kl_ref_from=vllm, among the named teachers


def serves_reference(cfg: Config) -> bool:
    """A server of the starting weights scores every sample for the reference KL."""
    loss = cfg.trainer.loss
    return loss.kl_ref_tau > 0 and loss.kl_ref_from == ReferenceSource.vllm


def serves_starting_weights(cfg: Config) -> bool:
    """The run starts a server of the student's starting weights (REFERENCE): for the reference KL, or for the self-
    teacher of a mode that scores with the starting weights or a lagged copy and cannot take them from the student's
    server (no LoRA: its base is the policy itself); a lagged copy is loaded into it."""
    apart = self_teachers(cfg) & {SelfTeacher.initial, SelfTeacher.lagged}
    return serves_reference(cfg) or (bool(apart) and not cfg.trainer.lora.enabled)


def teacher_names(cfg: Config) -> list[str]:
    """The run's teachers: `teacher` where it is set, then every named one, then a served reference."""
    names = ([DEFAULT] if cfg.teacher.kind != TeacherKind.none else []) + list(cfg.teachers)
    return names + [REFERENCE] if serves_starting_weights(cfg) and REFERENCE not in names else names


def teacher_config(cfg: Config, name: str) -> TeacherConfig:
    if name == DEFAULT:
        return cfg.teacher
    return cfg.teachers[name] if name in cfg.teachers else reference_teacher(cfg)  # the reference, until published


def reference_teacher(cfg: Config) -> TeacherConfig:
    """The served reference: the student's model as the run starts, at the student server's settings."""
    m = cfg.model
    return TeacherConfig(
        kind=TeacherKind.local_vllm, model=m.name, revision=m.revision, path=m.path, warm_start=m.warm_start
    )


def teacher_key(name: str) -> str:
    """The config key of a teacher: `teacher`, or `teachers.<name>`."""
    return "teacher" if name == DEFAULT else f"teachers.{name}"


def server_role(name: str) -> str:
    return SERVER_ROLE if name == DEFAULT else f"{SERVER_ROLE}_{name}"


def local_teachers(cfg: Config) -> list[str]:
    """The teachers whose vLLM server this run starts."""
    return [n for n in teacher_names(cfg) if teacher_config(cfg, n).kind == TeacherKind.local_vllm]


def source_teachers(cfg: Config) -> dict[str, str]:
    """By source label (a mix's; "" for a task of one source), the name of the teacher that teaches it."""
    if cfg.task.name != MIX:
        return {"": DEFAULT}
    return {label: src.teacher or DEFAULT for label, src in mix_sources(cfg.task)}


def teaches(cfg: Config, name: str, fact: Callable[[Mode], bool]) -> bool:
    """Whether the teacher teaches a source whose mode has `fact` (scores the student's tokens, writes rollouts)."""
    return any(fact(mode) and (src.teacher or DEFAULT) == name for _, src, mode in source_modes(cfg))


def teacher_view(cfg: Config, name: str) -> Config:
    """The run's config as a named teacher sees it: its TeacherConfig as `teacher` and the mix of the sources it
    teaches as `task`; the teachers' GPUs are checked once for all of them (rules/deployment.py gpu_counts), not
    in a view. The default teacher sees the run's config itself (it may teach every source)."""
    if name == DEFAULT:
        return cfg
    no_gpus = replace(cfg.deployment, num_teacher_gpus=None)
    if name == REFERENCE and serves_starting_weights(cfg):  # (its settings in `teachers` once its URL is published)
        return replace(cfg, teacher=teacher_config(cfg, name), deployment=no_gpus)
    taught = [src for src in cfg.task.mix if src.teacher == name] if cfg.task.name == MIX else []
    task = TaskConfig(name=MIX, mix=taught, num_eval=cfg.task.num_eval)
    return replace(cfg, teacher=cfg.teachers[name], task=task, deployment=no_gpus)


def named_views(cfg: Config) -> Iterator[tuple[str, Config]]:
    """(name, view) of each named teacher: what is checked or prepared for `teacher` is done for each of these too."""
    for name in cfg.teachers:
        yield name, teacher_view(cfg, name)


def named_errors(name: str):
    """A check run on a named teacher's view: its error names `teachers.<name>.…` where it said `teacher.…`."""
    return keys_renamed("teacher.", f"{teacher_key(name)}.")


def with_teacher(cfg: Config, name: str, teacher: TeacherConfig) -> Config:
    """The run's config with one teacher's settings replaced (a server's published URL, a resolved API)."""
    if name == DEFAULT:
        return replace(cfg, teacher=teacher)
    return replace(cfg, teachers={**cfg.teachers, name: teacher})

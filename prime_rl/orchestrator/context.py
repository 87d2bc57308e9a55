"""What every part of an orchestrator step works with: the config, the task, the tokenizer, the clients."""

from dataclasses import dataclass, field, replace

from prime_rl.config.judge import judge_teacher, judged_labels
from prime_rl.config.schema import Config, TeacherKind
from prime_rl.config.teachers import DEFAULT, source_teachers, teacher_key, teacher_names, teacher_view
from prime_rl.inference.client import InferenceClient, Sampling
from prime_rl.judge.judge import Judge
from prime_rl.models.chat import final_answer, student_tokenizer, turn_end_ids
from prime_rl.orchestrator.difficulty import DifficultyFilter
from prime_rl.orchestrator.env_pool import EnvPool
from prime_rl.orchestrator.students import StudentServers, student_client
from prime_rl.orchestrator.tool_calls import ToolReader
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import STUDENT_MODEL_NAME
from prime_rl.tasks import Example, Task, load_task
from prime_rl.tasks.reward_workers import Verification
from prime_rl.teacher.answers import TeacherAnswers
from prime_rl.teacher.client import teacher_client
from prime_rl.teacher.score_store import ScoreStore


@dataclass
class Teacher:
    """One of the run's teachers (config/teachers.py): `teacher`, or a named one of `teachers`."""

    name: str  # "" for `teacher`
    cfg: Config  # the run's config as this teacher sees it (teacher_view): its settings are cfg.teacher
    client: InferenceClient
    model: str  # the model name it is asked for
    answers: TeacherAnswers | None = None  # its chat answers (sft rollouts, its eval), cached and counted
    scores: ScoreStore | None = None  # what it said about token sequences, kept in its cache dir (opd)

    @property
    def label(self) -> str:
        """What a sample it scored or wrote records as its teacher: the model, or the named teacher's key."""
        return self.model if self.name == DEFAULT else teacher_key(self.name)

    @property
    def local(self) -> bool:
        return self.cfg.teacher.kind == TeacherKind.local_vllm

    def sees(self, ex: Example) -> Example:
        """The example as this teacher is asked about it: with its system_prompt, which the student is never shown."""
        shown = self.cfg.teacher.system_prompt
        return ex.shown(shown) if shown is not None else ex


@dataclass
class Context:
    cfg: Config
    run_dir: RunDir
    task: Task
    verification: Verification  # rewards, in worker processes with a time limit
    tokenizer: object
    student: InferenceClient | StudentServers
    student_model: str  # served name to sample from (the LoRA adapter's name with lora=on)
    teachers: dict[str, Teacher]  # by name ("" for `teacher`): the run's teachers
    source_teachers: dict[str, str]  # by source label: the name of its teacher
    envs: EnvPool = field(default_factory=EnvPool)  # task=gym: the environments episodes are played against
    tool_readers: dict[str, ToolReader] = field(default_factory=dict)  # task=gym with tools: by parser name
    difficulty: DifficultyFilter | None = None  # orchestrator.difficulty: the prompts held back, by step
    judge: Judge | None = None  # the judge of the sources with task.verifier=judge (None: no source is judged)
    judged: frozenset[str] = frozenset()  # the labels of those sources ("" outside a mix)
    # by id() of an episode's sample, its conversation (messages, tool schemas), for those that read it (opd with a
    # teacher of another tokenizer renders it in its own template); None: nobody does, none is kept
    conversations: dict[int, tuple[list[dict], list[dict] | None]] | None = None

    def teacher_of(self, source: str) -> Teacher:
        """The teacher of a source (an Example's or a Sample's label)."""
        return self.teachers[self.source_teachers.get(source, DEFAULT)]

    def is_taught(self, source: str) -> bool:
        """The source has a teacher in this run (in a mix, an rl source may have none)."""
        return self.source_teachers.get(source, DEFAULT) in self.teachers


def make_context(cfg: Config) -> Context:
    lora, task, run_dir = cfg.trainer.lora, load_task(cfg.task), RunDir(cfg.run_dir)
    difficulty = cfg.orchestrator.difficulty
    teachers = {name: make_teacher(cfg, name) for name in teacher_names(cfg)}
    judge = judge_teacher(cfg)
    return Context(
        cfg=cfg,
        run_dir=run_dir,
        task=task,
        verification=Verification(cfg.task, cfg.orchestrator.verification),
        tokenizer=student_tokenizer(cfg),
        student=student_client(cfg),
        student_model=lora.name if lora.enabled else STUDENT_MODEL_NAME,
        teachers=teachers,
        source_teachers=source_teachers(cfg),
        difficulty=DifficultyFilter(difficulty, task, run_dir.difficulty) if difficulty.enabled else None,
        judge=None if judge is None else Judge(cfg.judge, teachers[judge]),
        judged=judged_labels(cfg),
    )


def make_teacher(cfg: Config, name: str) -> Teacher:
    view = teacher_view(cfg, name)
    return Teacher(name, view, *teacher_client(view), scores=ScoreStore.of(view))


def sampling(cfg: Config, temperature: float | None = None) -> Sampling:
    s = cfg.orchestrator.sampling
    return Sampling(
        temperature=s.temperature if temperature is None else temperature, top_p=s.top_p, max_tokens=s.max_tokens
    )


def teacher_sampling(cfg: Config, temperature: float | None = None) -> Sampling:
    """Sampling for a teacher's answers (`cfg`: as that teacher sees the run, Teacher.cfg): a reasoning model thinks
    within its length cap (teacher.max_tokens)."""
    return replace(
        sampling(cfg, temperature), max_tokens=cfg.teacher.max_tokens or cfg.orchestrator.sampling.max_tokens
    )


def student_sampling(ctx: Context, temperature: float | None = None) -> Sampling:
    """Sampling for the student, which also stops at its template's end of turn: sft teaches that token as the
    end of an answer, and a base model's eos is another one (Qwen2.5's is <|endoftext|>, its turns end <|im_end|>)."""
    return replace(sampling(ctx.cfg, temperature), stop_token_ids=turn_end_ids(ctx.tokenizer))


def completion_text(ctx: Context, completion_ids: list[int]) -> str:
    """What the verifier scores: the completion's text after any leading reasoning block."""
    return final_answer(ctx.tokenizer.decode(completion_ids, skip_special_tokens=True))

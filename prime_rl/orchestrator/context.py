"""What every part of an orchestrator step works with: the config, the task, the tokenizer, the clients."""

from dataclasses import dataclass, field, replace

from prime_rl.config.schema import Config, TeacherKind
from prime_rl.inference.client import InferenceClient, Sampling
from prime_rl.models.chat import final_answer, student_tokenizer, turn_end_ids
from prime_rl.orchestrator.difficulty import DifficultyFilter
from prime_rl.orchestrator.env_pool import EnvPool
from prime_rl.orchestrator.students import StudentServers, student_client
from prime_rl.orchestrator.tool_calls import ToolReader
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import STUDENT_MODEL_NAME
from prime_rl.tasks import Task, load_task
from prime_rl.tasks.reward_workers import Verification
from prime_rl.teacher.answers import TeacherAnswers
from prime_rl.teacher.client import teacher_client


@dataclass
class Context:
    cfg: Config
    run_dir: RunDir
    task: Task
    verification: Verification  # rewards, in worker processes with a time limit
    tokenizer: object
    student: InferenceClient | StudentServers
    student_model: str  # served name to sample from (the LoRA adapter's name with lora=on)
    teacher: InferenceClient | None
    teacher_model: str | None
    answers: TeacherAnswers | None  # the teacher's chat answers (sft rollouts, its eval), cached and counted
    envs: EnvPool = field(default_factory=EnvPool)  # task=gym: the environments episodes are played against
    tool_readers: dict[str, ToolReader] = field(default_factory=dict)  # task=gym with tools: by parser name
    difficulty: DifficultyFilter | None = None  # orchestrator.difficulty: the prompts held back, by step


def make_context(cfg: Config) -> Context:
    teacher, teacher_model = teacher_client(cfg) if cfg.teacher.kind != TeacherKind.none else (None, None)
    lora, task, run_dir = cfg.trainer.lora, load_task(cfg.task), RunDir(cfg.run_dir)
    difficulty = cfg.orchestrator.difficulty
    return Context(
        cfg=cfg,
        run_dir=run_dir,
        task=task,
        verification=Verification(cfg.task, cfg.orchestrator.verification),
        tokenizer=student_tokenizer(cfg),
        student=student_client(cfg),
        student_model=lora.name if lora.enabled else STUDENT_MODEL_NAME,
        teacher=teacher,
        teacher_model=teacher_model,
        answers=None,
        difficulty=DifficultyFilter(difficulty, task, run_dir.difficulty) if difficulty.enabled else None,
    )


def sampling(cfg: Config, temperature: float | None = None) -> Sampling:
    s = cfg.orchestrator.sampling
    return Sampling(
        temperature=s.temperature if temperature is None else temperature, top_p=s.top_p, max_tokens=s.max_tokens
    )


def teacher_sampling(cfg: Config, temperature: float | None = None) -> Sampling:
    """Sampling for the teacher's answers: a reasoning model thinks within its length cap (teacher.max_tokens)."""
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

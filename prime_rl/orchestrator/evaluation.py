"""Evaluation on the task's eval split: k samples per prompt (`orchestrator.eval.samples_per_prompt`), sent as a
few batched requests (episodes, where the task has an environment), scored by the verifier processes (or by the
episode's environment); the same on each of orchestrator.eval.tasks at its own interval (eval/<label>/…); and, at
the run's first step, the teacher's level."""

import asyncio
import math
import statistics
from dataclasses import dataclass, replace

from prime_rl.config.evaluation import due, due_for_eval, eval_task_config, task_interval
from prime_rl.config.judge import judged_labels
from prime_rl.config.modes import RolloutSource, example_mode
from prime_rl.config.sources import source_label
from prime_rl.inference.client import ChatAnswer
from prime_rl.models.chat import final_answer
from prime_rl.orchestrator.context import Context, student_sampling, teacher_sampling
from prime_rl.orchestrator.env_pool import EnvPool
from prime_rl.orchestrator.rollouts import reply_rewards, rewards_of, student_rollouts
from prime_rl.orchestrator.teacher_episodes import teacher_episodes
from prime_rl.tasks import Example, load_task
from prime_rl.tasks.reward_workers import Verification


async def evaluate(ctx: Context, prefix: str = "eval") -> dict[str, float]:
    """The eval metrics of the current policy on ctx.task's eval split, named <prefix>/…"""
    e = ctx.cfg.orchestrator.eval
    examples = ctx.task.eval[: e.num_examples]
    # Unseeded: vLLM gives every prompt of a seeded request the same random stream, so one seed made all the
    # eval samples move together (one policy scored 0.27, 0.39 and 0.61 under three seeds). Independent
    # samples give an ordinary estimate, with its standard error in the metrics; greedy eval is temperature 0.
    k = e.samples_per_prompt
    groups, made = await student_rollouts(ctx, examples, k, student_sampling(ctx, temperature=e.temperature))
    rewards = await rewards_of(ctx, examples, groups)
    tokens = [s.trained_tokens for group in groups for s in group]  # the student's own (an episode's turns)
    metrics = {**eval_metrics(rewards, k, prefix), f"{prefix}/completion_tokens": statistics.fmean(tokens)}
    metrics.update({f"{prefix}/{k}": v for k, v in made.items() if k.startswith("env/")})  # episodes: turns, failures
    sources = [ex.source for ex in examples for _ in range(k)]
    for label in ctx.task.weights:  # a mix: each source's own numbers too
        mine = [i for i, source in enumerate(sources) if source == label]
        if mine:
            metrics.update(eval_metrics([rewards[i] for i in mine], k, prefix=f"{prefix}/{label}"))
            metrics[f"{prefix}/{label}/completion_tokens"] = statistics.fmean(tokens[i] for i in mine)
    return metrics


@dataclass
class EvalTask:
    """One of orchestrator.eval.tasks: its context (its task, verifier, k) beside the run's."""

    label: str
    interval: int
    ctx: Context


def eval_tasks(ctx: Context) -> list[EvalTask]:
    """The contexts of orchestrator.eval.tasks: the run's student, each task's own data and verifier processes."""
    cfg = ctx.cfg
    tasks = []
    for t in cfg.orchestrator.eval.tasks:
        own = eval_task_config(cfg, t)
        verification = Verification(own.task, cfg.orchestrator.verification)
        mine = replace(
            ctx,
            cfg=own,
            task=load_task(own.task),
            verification=verification,
            envs=EnvPool(),
            difficulty=None,
            judged=judged_labels(own),  # by its own verifier, not the run's
        )
        tasks.append(EvalTask(source_label(t), task_interval(cfg, t), mine))
    return tasks


async def evaluate_due(ctx: Context, tasks: list[EvalTask], step: int) -> dict[str, float]:
    """Every evaluation due at `step` (0: the run's end too): the task's own split, then each of the eval tasks."""
    metrics = await evaluate(ctx) if due_for_eval(ctx.cfg, step) else {}
    for t in tasks:
        if due(ctx.cfg, t.interval, step):
            metrics.update(await evaluate(t.ctx, prefix=f"eval/{t.label}"))
    return metrics


def eval_metrics(rewards: list[float], k: int, prefix: str = "eval") -> dict[str, float]:
    """Mean reward (= avg@k) and its standard error over prompts, the fraction of exact answers, and pass@j for
    j = 1, 2, 4, …, k, of rewards that come in groups of k (a prompt's samples)."""
    groups = [rewards[i : i + k] for i in range(0, len(rewards), k)]
    mean = sum(rewards) / len(rewards)
    exact = sum(r == 1.0 for r in rewards) / len(rewards)
    metrics = {
        f"{prefix}/reward": mean,
        f"{prefix}/reward_stderr": standard_error([statistics.fmean(group) for group in groups]),
        f"{prefix}/exact": exact,
        f"{prefix}/avg@{k}": mean,
    }
    powers = [2**i for i in range(k.bit_length())]  # 1, 2, 4, … up to k
    for j in powers + ([k] if k not in powers else []):
        passes = [pass_at_k(k, sum(r == 1.0 for r in group), j) for group in groups]
        metrics[f"{prefix}/pass@{j}"] = sum(passes) / len(passes)
    return metrics


async def teacher_answer(ctx: Context, ex: Example, temperature: float) -> ChatAnswer:
    teacher = ctx.teacher_of(ex.source)
    [answer] = await teacher.answers.answers_at(
        teacher.sees(ex).messages, [0], teacher_sampling(teacher.cfg, temperature)
    )
    return answer


def standard_error(values: list[float]) -> float:
    """Of the mean of independent values (here: each prompt's mean reward)."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate, from n samples of which c are right, that at least one of k samples is right:
    1 - C(n-c, k) / C(n, k) (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


async def evaluate_teacher(ctx: Context) -> dict[str, float]:
    """The teacher's eval reward under the same sampling, one answer per prompt: the level distilled toward. The
    teacher plays the episodes of a source with an environment only where it writes the rollouts (sft); elsewhere
    its level is that of the single-turn prompts."""
    cfg, temperature = ctx.cfg, ctx.cfg.orchestrator.eval.temperature
    # each source's own teacher (in a mix where sources name theirs), the run's teacher for the rest
    examples = [ex for ex in ctx.task.eval[: cfg.orchestrator.eval.num_examples] if ctx.is_taught(ex.source)]
    single = [ex for ex in examples if ex.env is None]
    played = [ex for ex in examples if ex.env is not None and example_mode(cfg, ex).rollouts == RolloutSource.teacher]
    rewards = []
    if single:
        answers = await asyncio.gather(*(teacher_answer(ctx, ex, temperature) for ex in single))
        rewards += await reply_rewards(ctx, [(final_answer(a.text), ex) for a, ex in zip(answers, single)])
    episodes, _ = await teacher_episodes(ctx, played, 1, temperature)
    rewards += [s.reward for group in episodes for s in group]
    if not rewards:
        return {}
    metrics = {"eval/teacher_reward": sum(rewards) / len(rewards)}
    sources = [ex.source for ex in single + played]
    for label in ctx.task.weights:  # a mix: the level each source is distilled toward
        mine = [r for source, r in zip(sources, rewards) if source == label]
        if mine:
            metrics[f"eval/{label}/teacher_reward"] = sum(mine) / len(mine)
    return metrics

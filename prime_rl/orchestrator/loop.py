"""The orchestrator's loop (docs/architecture.md, "One rl step"): for each step, a recent enough policy,
rollouts, rewards, advantages, teacher signals, then one batch file for the trainer. Evaluation rides along
every few steps."""

import asyncio
import json
import random
import time

from prime_rl.config.schema import Config, TeacherKind, TrainingMode
from prime_rl.inference.client import ChatAnswer
from prime_rl.models import teacher_dir
from prime_rl.models.chat import answer_ids, prompt_ids
from prime_rl.orchestrator.advantages import grpo_advantages
from prime_rl.orchestrator.context import Context, completion_text, make_context, student_sampling, teacher_sampling
from prime_rl.orchestrator.evaluation import evaluate, evaluate_teacher
from prime_rl.orchestrator.policy import PolicySync
from prime_rl.orchestrator.server_urls import locate_servers
from prime_rl.orchestrator.students import even_shares, sample_groups
from prime_rl.protocol.batch import Batch, Sample, write_batch
from prime_rl.protocol.metrics import append_row, due_for_eval, read_rows
from prime_rl.protocol.policy import policy_window
from prime_rl.tasks import Example, Task
from prime_rl.teacher.answers import TeacherAnswers, trained_text
from prime_rl.teacher.chat_api import resolved_api
from prime_rl.teacher.scoring import (
    check_same_tokenization,
    check_same_tokenizer,
    probe_prompt_logprobs,
    teacher_logprobs,
)


async def run(cfg: Config) -> None:
    ctx = make_context(await locate_servers(cfg))
    start = (ctx.run_dir.latest_checkpoint() or 0) if cfg.ckpt.resume else 0
    if ctx.teacher:
        # the launcher has probed an external endpoint already; run alone, the orchestrator probes it here
        ctx.answers = TeacherAnswers(cfg, ctx.teacher, ctx.teacher_model, await resolved_api(cfg))
    resume_counts(ctx, start)
    lora = cfg.trainer.lora
    policy = PolicySync(ctx.run_dir, ctx.student, lora.name if lora.enabled else None, cfg.step_timeout_s)
    try:
        await wait_for_servers(ctx)
        if cfg.training_mode == TrainingMode.opd:
            await preflight_opd(ctx)
        for step in range(start, cfg.max_steps):
            version = await policy.ensure(policy_window(step, cfg.orchestrator.max_async_level, start))
            batch = await make_batch(ctx, step, version)
            batch.metrics["time/reload"] = policy.reload_s
            policy.reload_s = 0.0
            if due_for_eval(cfg, step):
                eval_start = time.monotonic()
                batch.metrics.update(await evaluate(ctx))
                batch.metrics["time/eval"] = time.monotonic() - eval_start
                if step == start and ctx.teacher:
                    batch.metrics.update(await evaluate_teacher(ctx))
            if ctx.answers:
                batch.metrics.update(ctx.answers.step_metrics())
            batch.metrics.update(ctx.verification.metrics())
            write_batch(batch, ctx.run_dir.rollouts(step))
            print(json.dumps({"step": step, **batch.metrics}), flush=True)
        await policy.ensure(cfg.max_steps)
        if due_for_eval(cfg, 0):
            final = {"step": cfg.max_steps, **await evaluate(ctx)}
            append_row(ctx.run_dir.metrics, final)
            print(json.dumps(final), flush=True)
    finally:
        ctx.verification.close()
        await ctx.student.close()
        if ctx.teacher:
            await ctx.teacher.close()


def resume_counts(ctx: Context, start: int) -> None:
    """A resumed run goes on with the counts so far (verifier calls, the teacher's usage totals) and with the next
    sample index of each prompt."""
    if not start:
        return
    rows = [r for r in read_rows(ctx.run_dir.metrics) if "loss" in r and r["step"] < start]
    if rows:
        ctx.verification.resume(rows[-1])
        if ctx.answers:
            ctx.answers.totals = {
                k: v for k, v in rows[-1].items() if k.startswith("teacher/") and k.endswith("_total")
            }
    if ctx.answers and ctx.cfg.training_mode == TrainingMode.sft:
        for step in range(start):
            for ex in step_prompts(ctx.cfg, ctx.task, step):
                ctx.answers.skip(ex.messages, ctx.cfg.orchestrator.rollouts_per_example)


def step_prompts(cfg: Config, task: Task, step: int) -> list[Example]:
    """The step's prompts: a deterministic function of (seed, step), so a resumed run sees the same data."""
    n = cfg.orchestrator.batch_size // cfg.orchestrator.rollouts_per_example
    return task.draw(random.Random(cfg.seed * 1_000_003 + step), n)


async def make_batch(ctx: Context, step: int, version: int) -> Batch:
    cfg = ctx.cfg
    start = time.monotonic()
    examples = step_prompts(cfg, ctx.task, step)
    metrics = {"policy/staleness": float(step - version)}
    if cfg.training_mode == TrainingMode.sft:
        answers = await asyncio.gather(*(teacher_answers(ctx, ex) for ex in examples))
        groups = [[teacher_sample(ctx, ex, a) for a in group] for ex, group in zip(examples, answers)]
        cut = [a.finish_reason == "length" for group in answers for a in group]
        metrics["teacher/truncated"] = sum(cut) / len(cut)
    else:
        groups, metrics["seq_len/truncated"] = await student_rollouts(ctx, examples)
    generate_s = time.monotonic() - start
    samples = [s for group in groups for s in group]
    metrics["time/generate"] = generate_s
    if cfg.orchestrator.verification.enabled:
        metrics.update(await score(ctx, examples, groups))
    if cfg.training_mode == TrainingMode.opd:
        start = time.monotonic()
        await attach_teacher_logprobs(ctx, samples)
        metrics["time/teacher"] = time.monotonic() - start
    n_tokens = sum(len(s.completion_ids) for s in samples)
    metrics["seq_len/completion"] = n_tokens / len(samples)
    metrics["throughput/generate_tokens_per_s"] = n_tokens / max(generate_s, 1e-9)
    return Batch(step=step, policy_version=version, samples=samples, metrics=metrics)


async def student_rollouts(ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], float]:
    """One group of rollouts_per_example samples per prompt, in orchestrator.requests_per_step requests; and the
    fraction of them cut off by max_tokens."""
    o = ctx.cfg.orchestrator
    prompts = [prompt_ids(ctx.tokenizer, ex.messages) for ex in examples]
    # No per-request seed: vLLM would give every prompt of the request the same random stream.
    groups = await sample_groups(
        ctx.student, ctx.student_model, prompts, o.rollouts_per_example, student_sampling(ctx), o.requests_per_step
    )
    cut = [c.finish_reason == "length" for group in groups for c in group]
    samples = [[Sample(p, c.token_ids, c.logprobs) for c in group] for p, group in zip(prompts, groups)]
    return samples, sum(cut) / len(cut)


async def teacher_answers(ctx: Context, ex: Example) -> list[ChatAnswer]:
    n = ctx.cfg.orchestrator.rollouts_per_example
    return await ctx.answers.sample(ex.messages, n, teacher_sampling(ctx.cfg))


def teacher_sample(ctx: Context, ex: Example, answer: ChatAnswer) -> Sample:
    """The teacher's answer in the student's tokens; one cut off by max_tokens is not taught as finished."""
    text = trained_text(answer, ctx.cfg.teacher.reasoning)
    completion = answer_ids(ctx.tokenizer, ex.messages, text, finished=answer.finish_reason != "length")
    return Sample(prompt_ids(ctx.tokenizer, ex.messages), completion, inference_logprobs=[])


async def score(ctx: Context, examples: list[Example], groups: list[list[Sample]]) -> dict:
    """Rewards from the task's verifier, GRPO advantages, and the step's reward metrics."""
    pairs = [(completion_text(ctx, s.completion_ids), ex) for ex, group in zip(examples, groups) for s in group]
    rewards = await ctx.verification.rewards(pairs)
    for s, reward in zip((s for g in groups for s in g), rewards):
        s.reward = reward
    o = ctx.cfg.orchestrator
    for s, adv in zip(
        (s for g in groups for s in g), grpo_advantages(rewards, o.rollouts_per_example, o.std_normalize)
    ):
        s.advantage = adv
    metrics = {
        "reward/mean": sum(rewards) / len(rewards),
        "reward/exact": sum(r == 1.0 for r in rewards) / len(rewards),
    }
    for label in ctx.task.weights:  # a mix: each source's mean reward in this step
        mine = [r for (_, ex), r in zip(pairs, rewards) if ex.source == label]
        if mine:
            metrics[f"reward/{label}"] = sum(mine) / len(mine)
    return metrics


async def attach_teacher_logprobs(ctx: Context, samples: list[Sample]) -> None:
    """The teacher scores the step's samples in orchestrator.requests_per_step requests, each retried alone."""
    shares = even_shares([(s.prompt_ids, s.completion_ids) for s in samples], ctx.cfg.orchestrator.requests_per_step)
    replies = await asyncio.gather(*(teacher_logprobs(ctx.teacher, ctx.teacher_model, share) for share in shares))
    scores = [lp for reply in replies for lp in reply]
    for s, lp in zip(samples, scores):
        s.teacher_logprobs = lp


async def wait_for_servers(ctx: Context) -> None:
    """The run's own vLLM servers may still be starting (an external teacher is up or fails by its retries)."""
    timeout = ctx.cfg.launcher.ready_timeout_s
    await ctx.student.wait_ready(timeout)
    if ctx.cfg.teacher.kind == TeacherKind.local_vllm:
        await ctx.teacher.wait_ready(timeout)


async def preflight_opd(ctx: Context) -> None:
    """Before the first step: same tokenizer as the student, and an endpoint that returns prompt logprobs."""
    example = ctx.task.train[0]
    probe = prompt_ids(ctx.tokenizer, example.messages) + answer_ids(ctx.tokenizer, example.messages, example.answer)
    if ctx.cfg.teacher.kind == TeacherKind.local_vllm:
        check_same_tokenizer(ctx.tokenizer, teacher_dir(ctx.cfg))
    else:
        await check_same_tokenization(ctx.teacher, ctx.teacher_model, ctx.tokenizer, ctx.tokenizer.decode(probe))
    longest = ctx.cfg.inference.max_model_len - 1  # a rollout's length at most
    await probe_prompt_logprobs(ctx.teacher, ctx.teacher_model, probe[:longest])

"""The orchestrator's loop (docs/architecture.md, "One rl step"): for each step, a recent enough policy, then in
one straight line the mode's rollouts, rewards and advantages, the mode's teacher signal, and one batch file for the
trainer. Evaluation rides along every few steps. Nothing here depends on the mode: its part is orchestrator/algo/."""

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from prime_rl.config.evaluation import due_for_eval, evaluates_at
from prime_rl.config.judge import serves_reward_model
from prime_rl.config.schema import Config
from prime_rl.config.teachers import DEFAULT, serves_reference
from prime_rl.inference.server_urls import locate_servers
from prime_rl.models import student_dir
from prime_rl.orchestrator.advantages import grpo_advantages
from prime_rl.orchestrator.algo import Algorithm, algorithm
from prime_rl.orchestrator.context import Context, make_context
from prime_rl.orchestrator.device import OrchestratorTurn
from prime_rl.orchestrator.dynamic_sampling import group_metrics, refill
from prime_rl.orchestrator.evaluation import EvalTask, eval_tasks, evaluate_due, evaluate_teacher
from prime_rl.orchestrator.length_shaping import shaped_rewards
from prime_rl.orchestrator.policy import PolicySync
from prime_rl.orchestrator.prompts import prompts_per_step, step_prompts
from prime_rl.orchestrator.reference import reference_logprobs
from prime_rl.orchestrator.rollouts import rewards_of
from prime_rl.orchestrator.server_comeback import restart_metrics, watch_restarts
from prime_rl.protocol.batch import Batch, Sample, write_batch
from prime_rl.protocol.handoff import announce
from prime_rl.protocol.metrics import append_row, read_rows
from prime_rl.protocol.policy import policy_window
from prime_rl.protocol.run_dir import RunDir
from prime_rl.tasks import Example
from prime_rl.teacher.answers import TeacherAnswers
from prime_rl.teacher.chat_api import VLLM_API, resolved_api
from prime_rl.teacher.usage import TOTALS


@dataclass
class Session:
    """What an orchestrator works with from its first step to its last."""

    ctx: Context
    algo: Algorithm  # the run's modes' part of a step
    policy: PolicySync  # the weights the student's server holds
    device: OrchestratorTurn  # its turn on a shared device (colocated)
    eval_tasks: list[EvalTask]  # orchestrator.eval.tasks, evaluated beside the task's own split


@asynccontextmanager
async def session(cfg: Config, start: int) -> AsyncIterator[Session]:
    """The orchestrator set up for steps from `start` on (the servers found and ready, the mode's preflight passed),
    and everything it opened closed when it ends: the loop's, and a single step's (prime_rl/devstep)."""
    ctx = make_context(await locate_servers(cfg))
    for t in ctx.teachers.values():
        # the launcher has probed an external endpoint already; run alone, the orchestrator probes it here
        api = VLLM_API if serves_reward_model(cfg, t.name) else await resolved_api(t.cfg)
        t.answers = TeacherAnswers(t.cfg, t.client, t.model, api)
    algo = algorithm(cfg)
    resume_counts(ctx, algo, start)
    lora = cfg.trainer.lora
    policy = PolicySync(ctx.run_dir, ctx.student, lora.name if lora.enabled else None, cfg)
    watch_restarts(ctx, policy.restore)
    evals = eval_tasks(ctx)
    try:
        await wait_for_servers(ctx)
        device = OrchestratorTurn(ctx)
        if cfg.inference.url:
            # a standing server holds what its last run left there (awake or asleep): this run's starting model first
            async with device:
                await ctx.student.reload_weights(str(student_dir(cfg).resolve()))
                await device.loaded()
        await algo.preflight(ctx)
        yield Session(ctx, algo, policy, device, evals)
    finally:
        policy.listener.close()
        for c in [ctx] + [t.ctx for t in evals]:
            c.verification.close()
        await ctx.student.close()
        for t in ctx.teachers.values():
            await t.client.close()


async def run(cfg: Config) -> None:
    start = (RunDir(cfg.run_dir).latest_checkpoint() or 0) if cfg.ckpt.resume else 0
    async with session(cfg, start) as s:
        ctx, policy, device = s.ctx, s.policy, s.device
        for step in range(start, cfg.max_steps):
            # outside the turn: the trainer makes these weights in its own
            await policy.wait_for(policy_window(step, cfg.orchestrator.max_async_level, start))
            async with device:
                batch = await step_batch(s, step, start)
                write_batch(batch, ctx.run_dir.rollouts(step))
                log_samples(ctx, batch)
            announce(ctx.run_dir.handoff("batch"))
            print(json.dumps({"step": step, **batch.metrics}), flush=True)
        await policy.wait_for(cfg.max_steps)
        async with device:
            await policy.load_newest()
            await device.loaded()
            if evaluates_at(cfg, 0):
                final = {"step": cfg.max_steps, **await evaluate_due(ctx, s.eval_tasks, 0)}
                append_row(ctx.run_dir.metrics, final)
                print(json.dumps(final), flush=True)


async def step_batch(s: Session, step: int, start: int) -> Batch:
    """One step's batch from the newest weights the step may use, with its metrics (in the orchestrator's turn)."""
    version = await s.policy.load_newest()
    await s.device.loaded()
    batch = await make_batch(s.ctx, s.algo, step, version)
    await add_step_metrics(s, batch, step, start)
    if step == start and due_for_eval(s.ctx.cfg, step):
        batch.metrics.update(await s.algo.scorer_level(s.ctx))
    batch.metrics.update({**s.policy.take_times(), **s.device.take_times()})
    return batch


async def add_step_metrics(s: Session, batch: Batch, step: int, start: int) -> None:
    """Evaluation when due (the teacher's once, at the first step), the teacher's and the verifier's counts."""
    ctx = s.ctx
    if evaluates_at(ctx.cfg, step):
        eval_start = time.monotonic()
        batch.metrics.update(await evaluate_due(ctx, s.eval_tasks, step))
        batch.metrics["time/eval"] = time.monotonic() - eval_start
        if step == start and ctx.teachers and due_for_eval(ctx.cfg, step):
            batch.metrics.update(await evaluate_teacher(ctx))
    for t in ctx.teachers.values():
        batch.metrics.update({named_metric(t.name, k): v for k, v in t.answers.step_metrics().items()})
        if t.scores:
            batch.metrics.update({named_metric(t.name, k): v for k, v in t.scores.take_metrics().items()})
    batch.metrics.update(ctx.verification.metrics())
    if ctx.judge:
        batch.metrics.update(ctx.judge.take_metrics())
    batch.metrics.update(restart_metrics(ctx))


def named_metric(name: str, key: str) -> str:
    """A teacher's metric: `teacher/…` for `teacher`, `teacher/<name>/…` for a named one."""
    return key if name == DEFAULT else key.replace("teacher/", f"teacher/{name}/", 1)


def log_samples(ctx: Context, batch: Batch) -> None:
    """The step's first orchestrator.log_samples samples, to read what the policy does (an episode's whole
    transcript: its loss mask tells the student's tokens from the environment's) and what scored it (its per-token
    streams: the teacher's logprobs, the reference's)."""
    for s in batch.samples[: ctx.cfg.orchestrator.log_samples]:
        facts = {k: getattr(s, k) for k in ("mode", "source", "teacher", "reward", "advantage", "failed", "off_policy")}
        text = {"prompt": ctx.tokenizer.decode(s.prompt_ids), "completion": ctx.tokenizer.decode(s.completion_ids)}
        tokens = {k: getattr(s, k) for k in ("prompt_ids", "completion_ids", "loss_mask")}
        append_row(ctx.run_dir.samples, {"step": batch.step, **facts, **text, **tokens, **s.streams})


def resume_counts(ctx: Context, algo: Algorithm, start: int) -> None:
    """A resumed run goes on with the counts so far (verifier calls, the teacher's usage totals), with what the
    mode keeps across steps and with the difficulty filter's verdicts."""
    if not start:
        return
    rows = [r for r in read_rows(ctx.run_dir.metrics) if "loss" in r and r["step"] < start]
    if rows:
        ctx.verification.resume(rows[-1])
        for t in ctx.teachers.values():
            logged = {named_metric(t.name, f"teacher/{total}_total"): f"teacher/{total}_total" for total in TOTALS}
            t.answers.totals = {key: rows[-1][name] for name, key in logged.items() if name in rows[-1]}
    algo.resume(ctx, start)
    if ctx.difficulty:
        ctx.difficulty.resume(start)


async def make_batch(ctx: Context, algo: Algorithm, step: int, version: int) -> Batch:
    cfg = ctx.cfg
    waiting = ctx.difficulty.waiting(step, prompts_per_step(cfg)) if ctx.difficulty else []
    examples = step_prompts(cfg, ctx.task, step, waiting)
    start = time.monotonic()
    groups, metrics = await rollouts(algo, ctx, examples)
    generate_s = time.monotonic() - start
    generated = sum(s.trained_tokens for group in groups for s in group)
    if cfg.orchestrator.verification.enabled:
        score_start = time.monotonic()
        metrics.update(await score(ctx, examples, groups))  # the reward metrics: the step's own prompts
        metrics["time/score"] = time.monotonic() - score_start
        metrics.update(group_metrics(groups))
        if cfg.orchestrator.dynamic_sampling.enabled:
            groups, refill_metrics = await refill(
                cfg, ctx.task, step, examples, groups, lambda more: scored_rollouts(ctx, algo, more), waiting
            )
            metrics.update(refill_metrics)
        if ctx.difficulty:
            metrics.update(ctx.difficulty.close_step(step, len(waiting)))
    samples = [s for group in groups for s in group]
    metrics.update(await algo.teacher_signal(ctx, samples))
    if serves_reference(ctx.cfg):
        metrics.update(await reference_logprobs(ctx, samples))
    n_tokens = sum(s.trained_tokens for s in samples)
    metrics["policy/staleness"] = float(step - version)
    metrics["time/generate"] = generate_s
    metrics["seq_len/completion"] = n_tokens / len(samples)
    metrics["throughput/generate_tokens_per_s"] = generated / max(generate_s, 1e-9)  # the first draw's
    return Batch(step=step, policy_version=version, samples=samples, metrics=metrics)


async def scored_rollouts(ctx: Context, algo: Algorithm, examples: list[Example]) -> list[list[Sample]]:
    """The groups of `examples` with their rewards and advantages (a dynamic-sampling refill)."""
    groups, _ = await rollouts(algo, ctx, examples)
    await score(ctx, examples, groups)
    return groups


async def rollouts(algo: Algorithm, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict]:
    """The mode's groups of `examples`, each sample labelled with its prompt's source."""
    groups, metrics = await algo.rollouts(ctx, examples)
    for ex, group in zip(examples, groups):
        for s in group:
            s.source = ex.source
    return groups, metrics


async def score(ctx: Context, examples: list[Example], groups: list[list[Sample]]) -> dict:
    """Rewards (the verifier's, or an episode's own), GRPO advantages, and the step's reward metrics: the policy's,
    so without the episodes their environment broke (env/errors, env/timeouts count those) and without fixed
    completions (opd's off-policy share)."""
    rewards = await rewards_of(ctx, examples, groups)
    if ctx.difficulty:
        ctx.difficulty.judge(examples, groups)
    sources = [ex.source for ex, group in zip(examples, groups) for _ in group]
    o, samples = ctx.cfg.orchestrator, [s for g in groups for s in g]
    shaped, metrics = shaped_rewards(ctx.cfg, samples, rewards)
    counted = [not (s.failed or s.off_policy) for s in samples]  # the policy's own samples
    for s, adv in zip(samples, grpo_advantages(shaped, [len(g) for g in groups], o.std_normalize, counted, o.tie_std)):
        s.advantage = adv
    played = [(source, r) for source, r, c in zip(sources, rewards, counted) if c]
    if not played:  # every prompt on fixed completions (modes.opd.on_policy=0)
        return metrics
    metrics["reward/mean"] = sum(r for _, r in played) / len(played)
    metrics["reward/exact"] = sum(r == 1.0 for _, r in played) / len(played)
    for label in ctx.task.weights:  # a mix: each source's mean reward in this step
        mine = [r for source, r in played if source == label]
        if mine:
            metrics[f"reward/{label}"] = sum(mine) / len(mine)
    return metrics


async def wait_for_servers(ctx: Context) -> None:
    """The run's own vLLM servers may still be starting (an external teacher is up or fails by its retries)."""
    timeout = ctx.cfg.launcher.ready_timeout_s
    await ctx.student.wait_ready(timeout)
    for t in ctx.teachers.values():
        if t.local:
            await t.client.wait_ready(timeout)

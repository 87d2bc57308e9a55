"""opsd (on-policy self-distillation): the student samples the rollouts as in rl; then the student itself scores every
sampled token once more with privileged context, a system message showing the example's reference answer
(modes.opsd.context). The trainer turns that score into the per-token advantage
teacher_tau * (log p_privileged - log pi), or the top-k KL, exactly as opd's teacher's.

Which weights score (modes.opsd.teacher): the live policy, on the student's server as it is; the starting weights
(θ0), under LoRA the same server's base model (the request without the adapter: no second server, no copy), else
the run's server of the starting weights (config/teachers.py REFERENCE); or a lagged copy: the policy of every
`lag`-th step, kept out of the run's pruned weights, under LoRA an adapter served beside the live one, else loaded
into the server of the starting weights (a reload of the whole model every `lag` steps, and no second copy kept)."""

import os
import shutil
import time
from pathlib import Path

from prime_rl.config.modes import Mode, SelfTeacher, context_margin, distill_top_k, example_mode
from prime_rl.config.teachers import REFERENCE
from prime_rl.inference.client import InferenceClient
from prime_rl.models.chat import prompt_ids
from prime_rl.orchestrator.algo.rl import RL
from prime_rl.orchestrator.context import Context, student_sampling
from prime_rl.orchestrator.rollouts import rewards_of, student_rollouts
from prime_rl.orchestrator.scoring import keep_scores, scored
from prime_rl.protocol.atomic import publish_dir
from prime_rl.protocol.batch import Sample
from prime_rl.protocol.servers import STUDENT_MODEL_NAME
from prime_rl.tasks import Example

SCORER = "self"  # what a sample it scored records as its teacher


class OPSD(RL):
    def __init__(self, mode: Mode, knobs):
        super().__init__(mode, knobs)
        self.contexts: dict[int, list[int]] = {}  # by id() of a sample made this step: its privileged prompt
        self.steps = 0  # steps scored by this orchestrator: a lagged teacher is refreshed every `lag` of them

    async def rollouts(self, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict[str, float]]:
        groups, metrics = await super().rollouts(ctx, examples)
        for ex, group in zip(examples, groups):
            ids = prompt_ids(ctx.tokenizer, ex.shown(self.knobs.context).messages)
            self.contexts.update((id(s), ids) for s in group)
        return groups, metrics

    async def scorer_level(self, ctx: Context) -> dict[str, float]:
        """The student's eval reward shown the reference answer (as it scores), one sample per prompt at the eval's
        temperature: the level self-distillation pulls toward; no higher than the plain eval's, nothing to learn."""
        e = ctx.cfg.orchestrator.eval
        examples = [ex for ex in ctx.task.eval[: e.num_examples] if example_mode(ctx.cfg, ex) == self.mode]
        shown = [ex.shown(self.knobs.context) for ex in examples]
        groups, _ = await student_rollouts(ctx, shown, 1, student_sampling(ctx, temperature=e.temperature))
        rewards = await rewards_of(ctx, examples, groups)
        return {"eval/privileged_reward": sum(rewards) / len(rewards)} if rewards else {}

    async def lagged(self, ctx: Context) -> None:
        """Every `lag` steps the lagged teacher becomes the newest exported weights, linked into the run dir (the
        trainer prunes its exports as the run moves on).
        An adapter is loaded under its own name each step, so that a student server restarted in place serves it
        again (milliseconds); full weights are loaded into the server of the starting weights at each refresh, and
        again when that server was restarted in place."""
        lora = ctx.cfg.trainer.lora.enabled
        if self.steps % self.knobs.lag == 0:
            newest = ctx.run_dir.weights(ctx.run_dir.latest_weights())
            publish_dir(ctx.run_dir.self_teacher, lambda tmp: linked_copy(newest, tmp))
            if not lora:
                await self.reload_lagged(ctx)
        self.steps += 1
        if lora:
            await ctx.student.load_lora(lagged_name(ctx), str(ctx.run_dir.self_teacher.resolve()))

    async def reload_lagged(self, ctx: Context) -> str:
        """The server of the starting weights serves the lagged copy (and serves it again after a restart)."""
        starting = ctx.teachers[REFERENCE].client
        if starting.comeback:
            starting.comeback.restore = lambda: self.reload_lagged(ctx)
        await starting.reload_weights(str(ctx.run_dir.self_teacher.resolve()))
        return f"the lagged self-teacher, {ctx.run_dir.self_teacher}"

    async def teacher_signal(self, ctx: Context, samples: list[Sample]) -> dict[str, float]:
        """Each sample scored by the student's server under its privileged prompt; one that would not fit the
        server's context with it is not scored (its tokens train on the rewards' advantage alone)."""
        start, k = time.monotonic(), distill_top_k(ctx.cfg)
        room = ctx.cfg.inference.max_model_len - context_margin(ctx.cfg) - 1  # the server's, and a token to score
        trained = [(s, (self.contexts[id(s)], s.completion_ids)) for s in samples if s.trained_tokens]
        fit = [(s, pair) for s, pair in trained if len(pair[0]) + len(pair[1]) <= room]
        if self.knobs.teacher == SelfTeacher.lagged:
            await self.lagged(ctx)
        client, model = self_scorer(ctx, self.knobs.teacher)
        scores = await scored(ctx, client, model, [pair for _, pair in fit], k)
        for (s, _), (logprobs, top) in zip(fit, scores):
            keep_scores(s, logprobs, top, k, SCORER)
        self.contexts.clear()
        too_long = 1 - len(fit) / max(len(trained), 1)
        return {"time/self_score": time.monotonic() - start, "self_score/too_long": too_long}


def self_scorer(ctx: Context, teacher: SelfTeacher) -> tuple[InferenceClient, str]:
    """The server and the model name that score with the weights `teacher` names."""
    if teacher == SelfTeacher.live:
        return ctx.student, ctx.student_model
    lora = ctx.cfg.trainer.lora.enabled
    if teacher == SelfTeacher.lagged and lora:
        return ctx.student, lagged_name(ctx)
    if teacher == SelfTeacher.initial and lora:
        return ctx.student, STUDENT_MODEL_NAME  # the base model the adapter is trained on: θ0
    starting = ctx.teachers[REFERENCE]
    return starting.client, starting.model


def linked_copy(export: Path, to: Path) -> None:
    """A copy of an export that takes no space and outlives its pruning: hard links (an export is never written
    again)."""
    shutil.copytree(export, to, copy_function=os.link, dirs_exist_ok=True)


def lagged_name(ctx: Context) -> str:
    return f"{ctx.cfg.trainer.lora.name}-lagged"

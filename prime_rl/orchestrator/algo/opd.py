"""opd: the student samples the rollouts as in rl; the teacher scores every sampled token (prompt logprobs), which
the trainer turns into the per-token advantage teacher_tau * (log p_T - log pi). A teacher with another tokenizer
scores the sample's text in its own tokens, chunk by chunk (teacher/alignment.py, docs/cross_tokenizer.md), and its
top k at each chunk's start over the tokens both vocabularies have (teacher/shared_tokens.py).

GKD's off-policy share (modes.opd.on_policy < 1, per source task.mix[i].on_policy): the other prompts keep fixed
completions (their reference answer, or the teacher's own first answers), scored by the teacher like the student's
and trained by the divergence over its top k alone (trainer/loss.py OffPolicyDistill)."""

import asyncio
import random
import time

from prime_rl.config.modes import FixedCompletions, Mode, Scorer, distill_top_k, example_mode
from prime_rl.config.schema import TeacherAlignment
from prime_rl.config.sources import source_on_policy, source_rollouts
from prime_rl.config.teachers import teaches
from prime_rl.models.chat import answer_ids, prompt_ids
from prime_rl.orchestrator.algo.rl import RL
from prime_rl.orchestrator.algo.sft import teacher_sample
from prime_rl.orchestrator.context import Context, Teacher, teacher_sampling
from prime_rl.orchestrator.scoring import keep_scores, scored
from prime_rl.protocol.batch import TEACHER_CHUNKS, Sample
from prime_rl.tasks import Example
from prime_rl.teacher.alignment import Chunks, TextAlignment
from prime_rl.teacher.scoring import probe_teacher, resolve_alignment, scored_examples, teacher_tokenizer
from prime_rl.teacher.shared_tokens import SharedTokens


class OPD(RL):
    def __init__(self, mode: Mode, knobs):
        super().__init__(mode, knobs)
        self.aligners: dict[str, TextAlignment] = {}  # by teacher name: those with another tokenizer
        self.shared: dict[str, SharedTokens] = {}  # by teacher name, where the run distils from their top k
        self.draws = random.Random()  # which prompts the student samples (on_policy < 1), seeded by the run's seed
        self.prompts: dict[int, list[dict]] = {}  # by id() of a sample made this step: its teacher's prompt messages
        self.shown: dict[int, list[int]] = {}  # by id() of such a sample, where its teacher has a system_prompt: the
        # teacher's prompt in the student's tokens

    async def check_teachers(self, ctx: Context) -> None:
        for t in ctx.teachers.values():
            if not teaches(ctx.cfg, t.name, lambda m: m.scorer == Scorer.teacher):
                continue
            examples = scored_examples(ctx.cfg, ctx.task, t.name)
            alignment = await resolve_alignment(t.cfg, t.client, t.model, lambda: ctx.tokenizer, examples)
            await probe_teacher(t.client, t.model, alignment, ctx.tokenizer, examples[0], ctx.cfg)
            if alignment.kind == TeacherAlignment.text:
                self.aligners[t.name] = TextAlignment(ctx.tokenizer, teacher_tokenizer(alignment.tokenizer))
                if distill_top_k(ctx.cfg):
                    self.shared[t.name] = SharedTokens(self.aligners[t.name])
                ctx.conversations = {}  # an episode's conversation, for the teacher's own rendering of it

    async def preflight(self, ctx: Context) -> None:
        """Each teacher of an opd source scores the student's tokens, or its text where their tokenizers differ, and
        its endpoint returns prompt logprobs."""
        self.draws.seed(ctx.cfg.seed)
        await self.check_teachers(ctx)

    async def rollouts(self, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict[str, float]]:
        """The student samples a share of the prompts (modes.opd.on_policy, GKD's lambda, per source), the rest keep
        fixed completions; a teacher with a system prompt, or another tokenizer, is asked about each prompt as
        it is shown to it."""
        shares = source_on_policy(ctx.cfg, self.knobs.on_policy)
        sampled = [shares[ex.source] >= 1 or self.draws.random() < shares[ex.source] for ex in examples]
        on, metrics = await super().rollouts(ctx, [ex for ex, s in zip(examples, sampled) if s])
        off = await asyncio.gather(*(self.fixed(ctx, ex) for ex, s in zip(examples, sampled) if not s))
        each_on, each_off = iter(on), iter(off)
        groups = [next(each_on) if s else next(each_off) for s in sampled]
        if min(shares.values()) < 1:
            metrics["distill/on_policy"] = sum(sampled) / max(len(sampled), 1)
        for ex, group in zip(examples, groups):
            teacher = ctx.teacher_of(ex.source)
            if teacher.cfg.teacher.system_prompt is not None and teacher.name not in self.aligners:
                ids = prompt_ids(ctx.tokenizer, teacher.sees(ex).messages)
                self.shown.update((id(s), ids) for s in group)
        if self.aligners:  # a teacher with another tokenizer renders the prompt in its own chat template
            for ex, group in zip(examples, groups):
                self.prompts.update((id(s), ctx.teacher_of(ex.source).sees(ex).messages) for s in group)
                if ex.env is None:  # a reply: an id a dropped episode's sample had must not read as its episode
                    for s in group:
                        ctx.conversations.pop(id(s), None)
        return groups, metrics

    async def fixed(self, ctx: Context, ex: Example) -> list[Sample]:
        """A prompt's fixed completions: its reference answer, or its teacher's first answers (the same ones each
        time it is drawn: with teacher.cache_dir asked once, and their scores read from its store)."""
        if self.knobs.fixed == FixedCompletions.answer:
            completion = answer_ids(ctx.tokenizer, ex.messages, ex.answer, finished=True)
            mode = example_mode(ctx.cfg, ex).name
            group = [Sample(prompt_ids(ctx.tokenizer, ex.messages), completion, [], mode=mode)]
        else:
            teacher, indices = ctx.teacher_of(ex.source), list(range(source_rollouts(ctx.cfg)[ex.source]))
            answers = await teacher.answers.answers_at(
                teacher.sees(ex).messages, indices, teacher_sampling(teacher.cfg)
            )
            group = [teacher_sample(ctx, teacher, ex, answer) for answer in answers]
        for s in group:
            s.off_policy = True
        return group

    async def teacher_signal(self, ctx: Context, samples: list[Sample]) -> dict[str, float]:
        """Each sample's teacher scores it (its source's), in orchestrator.requests_per_step requests per teacher,
        each retried alone."""
        start = time.monotonic()
        scored = [s for s in samples if s.trained_tokens]  # an episode its environment broke has nothing to score
        by_teacher: dict[str, list[Sample]] = {}
        for s in scored:
            by_teacher.setdefault(ctx.teacher_of(s.source).name, []).append(s)
        on_text = {name: mine for name, mine in by_teacher.items() if name in self.aligners}
        done = await asyncio.gather(
            *(self.score(ctx, ctx.teachers[name], mine) for name, mine in by_teacher.items() if name not in on_text),
            *(self.score_text(ctx, ctx.teachers[name], mine) for name, mine in on_text.items()),
        )
        self.prompts.clear()
        self.shown.clear()
        if ctx.conversations:
            ctx.conversations.clear()
        chunks = [c for found in done if found for c in found[0]]  # the text-aligned teachers' chunks
        shared = [x for found in done if found for x in found[1]]
        metrics = chunk_metrics(chunks, sum(map(len, on_text.values())))
        if shared:
            metrics["distill/topk_shared_mass"] = sum(shared) / len(shared)
        return {"time/teacher": time.monotonic() - start, **metrics}

    async def score_text(
        self, ctx: Context, teacher: Teacher, samples: list[Sample]
    ) -> tuple[list[Chunks], list[float]]:
        """A teacher with another tokenizer scores each sample's text in its own tokens, after its own rendering of
        the prompt; a sample whose text it does not read back, or that would not fit its context, is not scored
        (its tokens train on the rewards' advantage alone). Returns the chunks of the samples it scored and, with a
        top k, each reply chunk's share of it the student's vocabulary has."""
        aligner, room = self.aligners[teacher.name], ctx.cfg.inference.max_model_len - 1  # and a token to score
        k, shared = distill_top_k(ctx.cfg), []
        pairs = [(s, self.teacher_view(ctx, aligner, s)) for s in samples]
        fit = [(s, pair) for s, pair in pairs if pair and len(pair[0]) + len(pair[1]) <= room]
        asked = [(p, c) for _, (p, c, _) in fit]
        replies = await scored(ctx, teacher.client, teacher.model, asked, k, teacher.scores)
        for (s, (_, _, chunks)), (logprobs, top) in zip(fit, replies):
            if k:
                top, mass = self.shared[teacher.name].student_top(top, chunks, k)
                shared += mass
            keep_scores(s, chunks.teacher_sums(logprobs), top, k, teacher.label)
            s.streams[TEACHER_CHUNKS] = chunks.starts()
        return [chunks for _, (_, _, chunks) in fit], shared

    async def score(self, ctx: Context, teacher: Teacher, samples: list[Sample]) -> None:
        """The teacher's logprobs of each sample's tokens (and its top k where the run distils from them), after
        the prompt as it is shown the teacher; a sample that would not fit its context so is not scored."""
        k, room = distill_top_k(ctx.cfg), ctx.cfg.inference.max_model_len - 1  # and a token to score
        pairs = [(s, (self.shown.get(id(s), s.prompt_ids), s.completion_ids)) for s in samples]
        fit = [(s, pair) for s, pair in pairs if len(pair[0]) + len(pair[1]) <= room]
        replies = await scored(ctx, teacher.client, teacher.model, [pair for _, pair in fit], k, teacher.scores)
        for (s, _), (logprobs, top) in zip(fit, replies):
            keep_scores(s, logprobs, top, k, teacher.label)

    def teacher_view(self, ctx: Context, aligner: TextAlignment, s: Sample) -> tuple | None:
        """A sample as a teacher of another tokenizer reads it: a reply after its prompt, or an episode's turns."""
        if id(s) in ctx.conversations:
            messages, tools = ctx.conversations[id(s)]
            mask = s.loss_mask or [True] * len(s.completion_ids)
            return aligner.teacher_episode(messages, tools, s.completion_ids, mask)
        return aligner.teacher_pair(self.prompts[id(s)], s.completion_ids, s.truncated)


def chunk_metrics(chunks: list[Chunks], samples: int) -> dict[str, float]:
    """Where teachers with another tokenizer scored: the share of student tokens in chunks of one token each side,
    the tokens per chunk each side, the share of their samples left unscored."""
    if not samples:
        return {}
    chunks = [c.replies() for c in chunks]  # an episode's turns between replies train nothing
    student = sum(sum(c.student) for c in chunks)
    count = max(sum(len(c.student) for c in chunks), 1)
    return {
        "distill/aligned_fraction": sum(c.one_to_one for c in chunks) / max(student, 1),
        "distill/chunk_student_tokens": student / count,
        "distill/chunk_teacher_tokens": sum(sum(c.teacher) for c in chunks) / count,
        "distill/unscored": 1 - len(chunks) / samples,
    }

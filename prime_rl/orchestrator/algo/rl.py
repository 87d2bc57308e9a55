"""rl: the student samples the rollouts; the task's rewards and GRPO advantages are the whole signal."""

from prime_rl.models.chat import prompt_ids
from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.context import Context, student_sampling
from prime_rl.orchestrator.students import sample_groups
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example


class RL(Algorithm):
    async def rollouts(self, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict[str, float]]:
        """In orchestrator.requests_per_step requests of whole groups; also the fraction cut off by max_tokens."""
        o = ctx.cfg.orchestrator
        prompts = [prompt_ids(ctx.tokenizer, ex.messages) for ex in examples]
        # No per-request seed: vLLM would give every prompt of the request the same random stream.
        groups = await sample_groups(
            ctx.student, ctx.student_model, prompts, o.rollouts_per_example, student_sampling(ctx), o.requests_per_step
        )
        cut = [c.finish_reason == "length" for group in groups for c in group]
        mode = ctx.cfg.training_mode.value
        samples = [[Sample(p, c.token_ids, c.logprobs, mode=mode) for c in group] for p, group in zip(prompts, groups)]
        return samples, {"seq_len/truncated": sum(cut) / len(cut)}

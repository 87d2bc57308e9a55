"""The orchestrator's first step in this process: orchestrator/loop.py's session (the same context, the mode's part
and its preflight, the wait for the servers, the same clean-up) and its `step_batch` from the starting weights, in
the orchestrator's turn on the device; the batch stays in memory instead of going to rollouts/step_0.bin."""

from prime_rl.config.schema import Config
from prime_rl.orchestrator.loop import session, step_batch
from prime_rl.protocol.batch import TEACHER_LOGPROBS, Batch, Sample

START = 0  # the first step, from the starting weights (weights/step_0, which the trainer published)


async def orchestrator_step(cfg: Config) -> tuple[Batch, list[dict]]:
    """The step's batch, and what each of its samples is (`sample_facts`)."""
    async with session(cfg, START) as s:
        await s.policy.wait_for(START)
        async with s.device:
            batch = await step_batch(s, START, START)
        return batch, sample_facts(s.ctx.tokenizer, batch.samples)


def sample_facts(tokenizer, samples: list[Sample]) -> list[dict]:
    """Each sample as the trainer gets it: its prompt's group, text, reward and advantage, who made and scored it, and
    the mean logprob of its trained tokens under the sampler (mu) and, where a scorer scored it, the scorer."""
    groups = group_numbers(samples)
    return [
        {
            "group": group,
            "mode": s.mode,
            "source": s.source,
            "teacher": s.teacher,
            "prompt": tokenizer.decode(s.prompt_ids),
            "completion": tokenizer.decode(s.completion_ids),
            "reward": s.reward,
            "advantage": s.advantage,
            "prompt_tokens": len(s.prompt_ids),
            "completion_tokens": len(s.completion_ids),
            "trained_tokens": s.trained_tokens,
            "truncated": s.truncated,
            "failed": s.failed,
            "sampler_logprob_mean": trained_mean(s.inference_logprobs, s.loss_mask),
            "scorer_logprob_mean": trained_mean(s.streams.get(TEACHER_LOGPROBS), s.loss_mask),
            "streams": sorted(s.streams),
            "top_k": 0 if s.teacher_top_ids is None else s.teacher_top_ids.shape[1],
        }
        for s, group in zip(samples, groups)
    ]


def group_numbers(samples: list[Sample]) -> list[int]:
    """The group of each sample: a prompt's samples come in a row (a mode's group), so a new prompt starts one."""
    numbers, group = [], -1
    for i, s in enumerate(samples):
        group += i == 0 or s.prompt_ids != samples[i - 1].prompt_ids
        numbers.append(group)
    return numbers


def trained_mean(logprobs: list[float | None] | None, mask: list[bool] | None) -> float | None:
    """The mean over the tokens that train (all of a reply's; an episode's own turns), None where there is none."""
    if not logprobs:
        return None
    kept = [v for i, v in enumerate(logprobs) if v is not None and (mask is None or mask[i])]
    return sum(kept) / len(kept) if kept else None

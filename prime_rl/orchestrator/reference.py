"""The served reference of trainer.loss.kl_ref_from=vllm: the starting policy's logprob of every completion token,
scored by its own vLLM server (config/teachers.py REFERENCE) as a mode's scorer scores (orchestrator/scoring.py),
for the trainer's reference KL (trainer/reference.py), in every mode."""

import time

from prime_rl.config.teachers import REFERENCE
from prime_rl.orchestrator.context import Context
from prime_rl.orchestrator.scoring import scored
from prime_rl.protocol.batch import REF_LOGPROBS, Sample


async def reference_logprobs(ctx: Context, samples: list[Sample]) -> dict[str, float]:
    """Each sample with tokens to train gets the REF_LOGPROBS stream; the time it took."""
    start = time.monotonic()
    trained, reference = [s for s in samples if s.trained_tokens], ctx.teachers[REFERENCE]
    pairs = [(s.prompt_ids, s.completion_ids) for s in trained]
    for s, (logprobs, _) in zip(trained, await scored(ctx, reference.client, reference.model, pairs)):
        s.streams[REF_LOGPROBS] = logprobs
    return {"time/reference": time.monotonic() - start}

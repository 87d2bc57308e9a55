"""The file the orchestrator hands the trainer each step: samples plus the step's orchestrator metrics.

This module owns the format: the orchestrator builds `Sample`s, only `write_batch` and `read_batch` touch the file,
and the trainer collates what they return sample by sample. FORMAT counts changes of meaning: a file of another
format (a run dir written by older code) is refused in one line, never misread.
"""

from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from prime_rl.protocol.atomic import write_file

# 2: per-token loss mask, named per-token streams, each sample's mode and teacher; 3: teacher top-k; 4: failed;
# 5: teacher chunks (a teacher with another tokenizer)
FORMAT = 5
TEACHER_LOGPROBS = "teacher_logprobs"  # stream: the teacher's log p_T of each completion token (opd), or of its chunk
# stream, with a teacher of another tokenizer: 1 at the first token of each chunk of text both tokenizations share,
# 0 at the others; its tokens' teacher_logprobs each hold the teacher's log p_T of the whole chunk
TEACHER_CHUNKS = "teacher_chunks"
REF_LOGPROBS = "ref_logprobs"  # stream: the served reference's log of each completion token (kl_ref_from=vllm)


@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    inference_logprobs: list[float]  # mu: the sampler's logprob of each completion token (student rollouts)
    advantage: float = 0.0  # sequence-level advantage (GRPO)
    reward: float | None = None  # task reward (None when verification is off)
    loss_mask: list[bool] | None = None  # per completion token: whether it trains (None: every one does)
    streams: dict[str, list[float]] = field(default_factory=dict)  # named per-token values, e.g. teacher_logprobs
    mode: str = ""  # the training mode whose objective trains it: rl | opd | sft
    source: str = ""  # in a task mix: the label of its prompt's source ("" outside a mix)
    teacher: str | None = None  # the model name of the teacher that scored or wrote it (None: no teacher)
    truncated: bool = False  # a reply cut off by max_tokens (orchestrator.length)
    failed: bool = False  # an episode its environment broke: no token trains, its reward is no group's baseline
    off_policy: bool = False  # a fixed completion (opd's modes.opd.on_policy < 1): no sampler, the top-k term alone
    # trainer.loss.distill=topk: the teacher's k most likely tokens at each completion token's position ([tokens, k]
    # int32 ids, float32 log p_T; None: no top-k)
    teacher_top_ids: torch.Tensor | None = None
    teacher_top_logprobs: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """Tokens the trainer's forward pass sees: prompt and completion."""
        return len(self.prompt_ids) + len(self.completion_ids)

    @property
    def trained_tokens(self) -> int:
        """Completion tokens the loss sees: an episode's environment turns are context, not completion."""
        return len(self.completion_ids) if self.loss_mask is None else sum(self.loss_mask)


@dataclass
class Batch:
    step: int
    policy_version: int  # weights step the rollouts were sampled from
    samples: list[Sample]
    metrics: dict[str, float] = field(default_factory=dict)  # orchestrator metrics of this step


class BatchFormatError(ValueError):
    """A batch file of another format than this code's."""


def write_batch(batch: Batch, path: Path) -> None:
    raw = {
        "format": FORMAT,
        "step": batch.step,
        "policy_version": batch.policy_version,
        "samples": [asdict(s) for s in batch.samples],
        "metrics": batch.metrics,
    }
    write_file(path, lambda tmp: torch.save(raw, tmp))


def read_batch(path: Path) -> Batch:
    raw = torch.load(path, weights_only=True)
    found = raw.get("format", 1)  # format 1 had no version field
    if found != FORMAT:
        raise BatchFormatError(
            f"{path} is a batch of format {found}, this trainer reads format {FORMAT}; "
            "fix: start the run in a new run dir (ckpt.resume cannot continue a run written by other code)"
        )
    return Batch(raw["step"], raw["policy_version"], [Sample(**s) for s in raw["samples"]], raw["metrics"])

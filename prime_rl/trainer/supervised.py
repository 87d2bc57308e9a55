"""Supervised fine-tuning on (prompt, answer) examples in one process, without a run dir: the warm start of the
built-in tiny models and `python -m prime_rl.finetune`.

It is the trainer's own step (trainer/step.py) under training_mode=sft: the same collation, chunked logprobs, NLL,
AdamW, warmup and schedule, and gradient clipping as a launched run. Each step samples `batch_size` examples,
renders the prompt with the chat template (plus the generation prompt) and the answer where the template puts it,
closed by the template's end-of-turn token; the loss is the NLL of the answer tokens over their count.
"""

import logging
import random
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config.modes import SUPERVISED
from prime_rl.config.schema import Config, OptimConfig, TrainerConfig, WarmStartConfig
from prime_rl.models.chat import answer_ids, prompt_ids, transcript_ids
from prime_rl.models.tiny import save_model
from prime_rl.protocol.batch import Batch, Sample
from prime_rl.tasks.gym_env import demonstrated
from prime_rl.tasks.task import Example
from prime_rl.trainer.setup import trainer_around
from prime_rl.trainer.step import train_step

log = logging.getLogger(__name__)


def supervised_config(ws: WarmStartConfig) -> Config:
    """The trainer config of a fine-tuning run: NLL (sft) at the warm start's lr and schedule, a step's examples
    in one micro-batch."""
    optim = OptimConfig(lr=ws.lr, warmup_steps=ws.warmup_steps, schedule=ws.schedule)
    trainer = TrainerConfig(optim=optim, micro_batch_size=ws.batch_size)
    return Config(training_mode=SUPERVISED.name, max_steps=ws.steps, seed=ws.seed, trainer=trainer)


def supervised_samples(tokenizer, examples: list[Example]) -> list[Sample]:
    """Each example's prompt and answer in the model's tokens; the answer (with its end of turn) is what trains. An
    example played as an episode (task=gym) is its environment's demonstration, whose assistant turns train."""
    return [supervised_sample(tokenizer, e) for e in examples]


def supervised_sample(tokenizer, e: Example) -> Sample:
    if e.env is None:
        return Sample(
            prompt_ids(tokenizer, e.messages), answer_ids(tokenizer, e.messages, e.answer), [], mode=SUPERVISED.name
        )
    prompt, ids, mask = transcript_ids(tokenizer, *demonstrated(e))
    return Sample(prompt, ids, [], loss_mask=mask, mode=SUPERVISED.name)


def sft_train(model, tokenizer, examples: list[Example], ws: WarmStartConfig, out_dir: Path | None = None):
    """Train `model` (a model or a model dir) for `ws.steps` steps; save it with the tokenizer to `out_dir`."""
    if isinstance(model, (str, Path)):
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
        model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    trainer = trainer_around(supervised_config(ws), model, tokenizer, next(model.parameters()).device)
    rng = random.Random(ws.seed)
    for step in range(ws.steps):
        chosen = rng.sample(examples, min(ws.batch_size, len(examples)))
        metrics = train_step(trainer, Batch(step, step, supervised_samples(tokenizer, chosen)))
        if step % 20 == 0 or step == ws.steps - 1:
            log.info("fine-tuning step %d/%d loss %.4f lr %.2e", step + 1, ws.steps, metrics["loss"], metrics["lr"])
    model.eval()
    if out_dir is not None:
        save_model(model, tokenizer, Path(out_dir))
    return model

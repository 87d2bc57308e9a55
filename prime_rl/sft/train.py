"""Plain SFT on (prompt, answer) pairs: the warm start of the tiny models and the `python -m prime_rl.sft` loop.

Each step samples `batch_size` examples, renders the user prompt with the chat template (plus the
generation prompt), appends the answer and the template's end-of-turn token, and minimises the NLL of the answer tokens
normalised by their count. AdamW (0.9, 0.98), linear warmup then constant or cosine lr, grad clip 1.0.
"""

import logging
import random
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config.schema import WarmStartConfig
from prime_rl.models.chat import answer_ids, final_answer, padding_id, prompt_ids
from prime_rl.models.tiny import save_model
from prime_rl.tasks.task import Example, Task
from prime_rl.trainer.lr_schedule import decay_factor

log = logging.getLogger(__name__)


def sft_batch(tokenizer, examples: list[Example]) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (-100 on prompt and padding)."""
    prompts = [prompt_ids(tokenizer, e.messages) for e in examples]
    answers = [answer_ids(tokenizer, e.messages, e.answer) for e in examples]
    width = max(len(p) + len(a) for p, a in zip(prompts, answers))
    ids = torch.full((len(examples), width), padding_id(tokenizer))
    labels = torch.full((len(examples), width), -100)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (p, a) in enumerate(zip(prompts, answers)):
        ids[row, : len(p) + len(a)] = torch.tensor(p + a)
        labels[row, len(p) : len(p) + len(a)] = torch.tensor(a)
        mask[row, : len(p) + len(a)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def nll(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean NLL over the answer tokens of the whole batch (not per sequence)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    targets = batch["labels"][:, 1:]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)


def lr_at(step: int, ws: WarmStartConfig) -> float:
    if step < ws.warmup_steps:
        return ws.lr * (step + 1) / ws.warmup_steps
    progress = (step - ws.warmup_steps) / max(1, ws.steps - ws.warmup_steps)
    return ws.lr * decay_factor(ws.schedule, progress)


def sft_train(model, tokenizer, examples: list[Example], ws: WarmStartConfig, out_dir: Path | None = None):
    """Train `model` (a model or a model dir) for `ws.steps` steps; save it with the tokenizer to `out_dir`."""
    if isinstance(model, (str, Path)):
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
        model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    device = next(model.parameters()).device
    rng = random.Random(ws.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=ws.lr, betas=(0.9, 0.98), weight_decay=0.0)
    model.train()
    for step in range(ws.steps):
        for group in optim.param_groups:
            group["lr"] = lr_at(step, ws)
        batch = sft_batch(tokenizer, rng.sample(examples, min(ws.batch_size, len(examples))))
        loss = nll(model, {k: v.to(device) for k, v in batch.items()})
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        if step % 20 == 0 or step == ws.steps - 1:
            log.info("sft step %d/%d loss %.4f lr %.2e", step + 1, ws.steps, loss.item(), lr_at(step, ws))
    model.eval()
    if out_dir is not None:
        save_model(model, tokenizer, Path(out_dir))
    return model


@torch.no_grad()
def generate(
    model, tokenizer, prompts: list[str | list[dict]], max_tokens: int = 16, temperature: float = 0.0, seed: int = 0
):
    """Completions (text, special tokens dropped) of a batch of prompts (chat.prompt_ids): greedy at temperature 0."""
    ids = [prompt_ids(tokenizer, p) for p in prompts]
    width = max(map(len, ids))
    # Left padding so every row's generation starts right after its prompt.
    input_ids = torch.tensor([[padding_id(tokenizer)] * (width - len(p)) + p for p in ids])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ids])
    sampling = {"temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {}
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=input_ids.to(model.device),
        attention_mask=mask.to(model.device),
        max_new_tokens=max_tokens,
        do_sample=temperature > 0,
        pad_token_id=padding_id(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        **sampling,
    )
    return tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)


def eval_reward(model, tokenizer, task: Task, temperature: float = 0.0, num: int | None = None) -> float:
    """Mean task reward over (the first `num` of) the eval split."""
    examples = task.eval[:num]
    completions = generate(model, tokenizer, [e.messages for e in examples], temperature=temperature)
    return sum(task.reward(final_answer(c), e) for c, e in zip(completions, examples)) / len(examples)

"""A built model's eval reward without a server, by transformers' generate: each tiny model's recipe.json records its
greedy eval reward."""

import torch

from prime_rl.models.chat import final_answer, padding_id, prompt_ids
from prime_rl.tasks.task import Task


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


def eval_reward(model, tokenizer, task: Task, temperature: float = 0.0, num: int | None = None) -> float | None:
    """Mean task reward over (the first `num` of) the eval split's single-turn examples (None: it has none, an
    episode needs its environment and a server: the run's own step-0 eval measures it)."""
    examples = [e for e in task.eval[:num] if e.env is None]
    if not examples:
        return None
    completions = generate(model, tokenizer, [e.messages for e in examples], temperature=temperature)
    return sum(task.reward(final_answer(c), e) for c, e in zip(completions, examples)) / len(examples)

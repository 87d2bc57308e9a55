"""Build a tiny model once per recipe: tokenizer + seeded init + warm-start SFT, cached under its recipe's dir.

The build is published whole (protocol/atomic.py) under a per-recipe file lock: a crashed build never looks
complete, and two launchers building the same recipe at once build it once (the second waits, then reuses it).
"""

import json
import logging
import os
import random
import time
from dataclasses import replace
from pathlib import Path

from prime_rl.config.judge import code_verified
from prime_rl.config.modes import SHOWN_ANSWER
from prime_rl.config.schema import TaskConfig, TinyModelConfig, TinyTokenizer, WarmStartConfig
from prime_rl.models.recipe import RECIPE_FILE, model_dir, recipe, trained_on
from prime_rl.models.tokenizer_class import RECORD_KEY, tokenizer_record
from prime_rl.protocol.atomic import is_complete, publish_dir
from prime_rl.protocol.file_lock import FileLock
from prime_rl.tasks import Example
from prime_rl.tasks.gym_env import demonstrated

log = logging.getLogger(__name__)


def prepare_model(
    name: str, tiny: TinyModelConfig, warm_start: WarmStartConfig, task_cfg: TaskConfig, cache_dir: str | None
) -> Path:
    """The model dir for `name`: a user's dir as is, or the built (and cached) tiny model of this recipe."""
    target = model_dir(name, tiny, warm_start, task_cfg, cache_dir)
    if name != "tiny" or is_complete(target):
        return target
    warm_start, task_cfg = trained_on(warm_start, task_cfg)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.parent / f"{target.name}.lock"):
        if not is_complete(target):  # else another process built it while we waited
            publish_dir(target, lambda out: _build(out, tiny, warm_start, task_cfg))
    return target


def _build(out: Path, tiny: TinyModelConfig, warm_start: WarmStartConfig, task_cfg: TaskConfig) -> None:
    import torch
    from transformers.utils.logging import disable_progress_bar

    from prime_rl.models.tiny import build_tiny_model, save_model
    from prime_rl.models.tokenizer import build_bpe_tokenizer, build_tokenizer
    from prime_rl.prepare.greedy_eval import eval_reward
    from prime_rl.tasks.registry import load_task
    from prime_rl.trainer.supervised import sft_train

    disable_progress_bar()
    # one thread is fastest at the default widths (more thrash on small shared CPUs); wider models use every core
    torch.set_num_threads(1 if tiny.hidden_size <= 128 else os.cpu_count() or 1)
    start = time.time()
    log.info("building tiny model (%d warm-start steps) in %s", warm_start.steps, out)
    task = load_task(code_verified(task_cfg))
    tokenizer = (
        build_tokenizer()
        if tiny.tokenizer == TinyTokenizer.char
        else build_bpe_tokenizer(conversations(task), tiny.vocab_size)
    )
    model = build_tiny_model(tiny, tokenizer)
    rng = random.Random(warm_start.seed)
    if warm_start.context_steps:
        reading = [shown_another(ex, task.train, rng) for ex in task.train]
        model = sft_train(model, tokenizer, reading, replace(warm_start, steps=warm_start.context_steps))
    share = warm_start.context_share
    examples = [shown_another(ex, task.train, rng) if rng.random() < share else ex for ex in task.train]
    model = sft_train(model, tokenizer, examples, warm_start)
    save_model(model, tokenizer, out)
    info = {**recipe(tiny, warm_start, task_cfg), "build_s": round(time.time() - start, 1)}
    greedy = eval_reward(model, tokenizer, task)
    info["eval_greedy_reward"] = None if greedy is None else round(greedy, 4)
    if warm_start.context_steps or share:  # the same prompts shown their answer: what the model reads from it
        shown = eval_reward(model, tokenizer, replace(task, eval=[ex.shown(SHOWN_ANSWER) for ex in task.eval]))
        info["eval_greedy_shown_reward"] = None if shown is None else round(shown, 4)
    info[RECORD_KEY] = tokenizer_record(out)
    (out / RECIPE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log.info("built in %.1f s, greedy eval reward %s", info["build_s"], info["eval_greedy_reward"])


def shown_another(ex: Example, examples: list[Example], rng: random.Random) -> Example:
    """`ex` shown another example's answer in the self-teacher's context, which becomes its target: the answer is in
    the context alone (an episode is played as it is)."""
    if ex.env:
        return ex
    return replace(ex, answer=rng.choice(examples).answer).shown(SHOWN_ANSWER)


def conversations(task) -> list[list[dict]]:
    """The train split as chats (an episode's: its environment's demonstration): what the BPE tokenizer learns its
    merges from."""
    return [
        demonstrated(ex)[0] if ex.env else [*ex.messages, {"role": "assistant", "content": ex.answer}]
        for ex in task.train
    ]

"""Supervised fine-tuning on a JSONL file of {"prompt": ..., "answer": ...} lines.

    python -m prime_rl.finetune --data train.jsonl --model <model dir | tiny> --out <dir> --steps 80 \
        --batch-size 64 --lr 1e-3 [--warmup-steps 0 --schedule constant|cosine --seed 0 --threads 1]

`--model tiny` starts from a fresh built-in tiny model (seed `--init-seed`). Prompts are rendered as a
single user turn with the model's chat template; the loss is the NLL of the answer tokens and of the
template's end-of-turn token. Runs launched with `model.name=tiny` need none of this: the launcher builds
and warm-starts the tiny student and teacher itself (prime_rl.prepare.prepare_student / prepare_teacher).
"""

import argparse
import logging
from pathlib import Path

import torch

from prime_rl.config.schema import LrSchedule, TaskConfig, TinyModelConfig, WarmStartConfig
from prime_rl.config.user_error import run_or_exit
from prime_rl.models.tiny import build_tiny_model
from prime_rl.models.tokenizer import build_tokenizer
from prime_rl.tasks.hf import read_examples
from prime_rl.trainer.supervised import sft_train


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m prime_rl.finetune", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a .jsonl/.json/.csv/.parquet file or dataset with prompt and answer")
    p.add_argument("--model", required=True, help="a local Hugging Face model dir, or 'tiny'")
    p.add_argument("--out", required=True, help="where the trained model and tokenizer are saved")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps")
    p.add_argument("--batch-size", type=int, required=True, help="examples per step")
    p.add_argument("--lr", type=float, required=True, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=0, help="linear warmup steps")
    p.add_argument("--schedule", choices=[s.value for s in LrSchedule], default="constant", help="lr after warmup")
    p.add_argument("--seed", type=int, default=0, help="data order seed")
    p.add_argument("--init-seed", type=int, default=0, help="--model tiny: seed of the random init")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    run_or_exit(lambda: sft(args))


def sft(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    ws = WarmStartConfig(args.steps, args.batch_size, args.lr, args.warmup_steps, LrSchedule(args.schedule), args.seed)
    if args.model == "tiny":
        tokenizer = build_tokenizer()
        model = build_tiny_model(TinyModelConfig(init_seed=args.init_seed), tokenizer)
    else:
        model, tokenizer = Path(args.model), None
    sft_train(model, tokenizer, read_examples(TaskConfig(name="hf"), args.data, "train"), ws, Path(args.out))


if __name__ == "__main__":
    main()

"""TRL's side of bench/vs_trl.py: GRPOTrainer (transformers generate, no vLLM) on the project's tiny student,
task and verifier. Runs in bench/.venv-trl with the repo on PYTHONPATH; prints one JSON object per line
(`step`, `log`, `eval`, `done`), which the parent time-stamps on arrival.

    bench/.venv-trl/bin/python bench/trl_grpo.py '<spec json>'   (vs_trl.py writes the spec)
"""

import json
import sys
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from prime_rl.config.schema import TaskConfig
from prime_rl.models.chat import prompt_ids
from prime_rl.tasks import load_task
from prime_rl.tasks.rewards import similarity


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def reward_fn(completions, answer, **_):
    """The project's verifier, called the way TRL calls reward functions (conversational completions)."""
    return [similarity(c[0]["content"], a) for c, a in zip(completions, answer)]


class EvalCallback(TrainerCallback):
    """The project's eval: one sample at the eval temperature for each of the first N eval prompts, mean reward.
    At the start (step 0), every `interval` steps and after the last step, like the orchestrator."""

    def __init__(self, model, tokenizer, examples, spec):
        self.model, self.tokenizer, self.examples, self.spec = model, tokenizer, examples, spec
        self.generate = model.generate  # the untimed one: eval is not a rollout

    def on_train_begin(self, args, state, control, **kwargs):
        self.evaluate(0)

    def on_step_end(self, args, state, control, **kwargs):
        emit("step", step=state.global_step)
        if state.global_step % self.spec["eval_interval"] == 0 or state.global_step == state.max_steps:
            self.evaluate(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            emit("log", step=state.global_step, reward=logs["reward"])

    @torch.no_grad()
    def evaluate(self, step: int) -> None:
        start = time.monotonic()
        was_training = self.model.training
        self.model.eval()
        ids = [prompt_ids(self.tokenizer, ex.prompt) for ex in self.examples]
        batch = self.tokenizer.pad({"input_ids": ids}, padding=True, padding_side="left", return_tensors="pt")
        out = self.generate(
            **batch,
            do_sample=True,
            temperature=self.spec["eval_temperature"],
            top_p=1.0,
            top_k=0,
            max_new_tokens=self.spec["max_tokens"],
            pad_token_id=self.tokenizer.pad_token_id,
        )
        texts = self.tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        rewards = [similarity(t, ex.answer) for t, ex in zip(texts, self.examples)]
        self.model.train(was_training)
        emit("eval", step=step, reward=sum(rewards) / len(rewards), eval_s=time.monotonic() - start)


def time_generate(model, pad_token_id: int) -> None:
    """TRL samples each step's rollouts with one model.generate call: report its seconds and new tokens (pads
    excluded), the counterpart of our throughput/generate_tokens_per_s."""
    generate = model.generate

    def timed(*args, **kwargs):
        start = time.monotonic()
        out = generate(*args, **kwargs)
        new = out[:, kwargs["input_ids"].shape[1] :]
        emit("generate", s=time.monotonic() - start, tokens=int((new != pad_token_id).sum()))
        return out

    model.generate = timed


def main(spec: dict) -> None:
    torch.set_num_threads(spec["threads"])
    task = load_task(TaskConfig(**spec["task"]))
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    train = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": ex.prompt}], "answer": ex.answer} for ex in task.train]
    )
    config = GRPOConfig(output_dir=spec["output_dir"], **spec["grpo"])
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward_fn, args=config, train_dataset=train, processing_class=tokenizer
    )
    trainer.add_callback(EvalCallback(trainer.model, tokenizer, task.eval[: spec["eval_examples"]], spec))
    time_generate(trainer.model, tokenizer.pad_token_id)
    emit("ready", bf16=config.bf16)  # bf16 autocast (model_size.py: where our dtype=auto chose bfloat16)
    trainer.train()
    emit("done")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

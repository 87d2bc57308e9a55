"""Rewards from a judge (docs/how-to/judge.md) against the code verifier, on a built-in task of 5-letter words
(reverse, or sort with --task sort), whose code verifier (`exact`) is known: how often the judge's verdict agrees
with `exact` on the student's own samples and how many of the replies it passes are right, rl from the judge against
rl from `exact` at equal steps (both evaluated by `exact`), and what judging costs a step.

The judge: a tiny chat model of four layers warm-started 8000 steps on task=judge over the same words (reverse's
replies, right or wrong, answered yes or no; ~25-45 min to build on the 2-core CPU, once: cached), served by the
launcher as a named local teacher; its reward is P(yes) of its first token. Its rubric shows it the right answer, so
it judges sort's replies as well. Variants: `verifier` (task.verifier=exact) and `judge` (task.verifier=judge). Both
evaluate every 10 steps by `exact` (an eval task, eval/code/…) on the eval split's 128 prompts, sampled as in
training (at --temperature, 1 by default): greedy, the student is right on most of sort's prompts from the start.

    .venv/bin/python bench/judge.py --runs 3                # ~7 min once the judge is built
    .venv/bin/python bench/judge.py --runs 3 --task sort [--temperature 0.7]
    .venv/bin/python bench/judge.py --runs 1 --smoke --steps 4
"""

import argparse
import json
from pathlib import Path

from common import REPO, add_runs_arg, bench_dir, compare_variants, finish, median, print_table, run_launcher

from prime_rl.config.schema import LrSchedule, TaskConfig, TinyModelConfig, WarmStartConfig
from prime_rl.prepare import prepare_model
from prime_rl.tasks.builtin import TINY_JUDGE_RUBRIC

NAME = "judge"
WORDS = {"min_len": 5, "max_len": 5}
VARIANTS = ("verifier", "judge")
ANSWERS = {"reverse": lambda word: word[::-1], "sort": lambda word: "".join(sorted(word))}  # --task: the right reply
# four layers (two never learnt to compare two strings), 8000 steps (at 3000 it passed more near misses)
JUDGE_MODEL = TinyModelConfig(num_layers=4, num_kv_heads=4)
JUDGE_WARM_START = WarmStartConfig(steps=8000, lr=1e-3, warmup_steps=100, schedule=LrSchedule.cosine)


def judge_model(cache: Path) -> Path:
    """The judge's model dir, built once per recipe (cached like every tiny model)."""
    return prepare_model("tiny", JUDGE_MODEL, JUDGE_WARM_START, TaskConfig(name="judge", options=WORDS), str(cache))


def overrides(variant: str, judge_dir: Path, steps: int, seed: int, task: str, temperature: float) -> list[str]:
    words = f"{{min_len:{WORDS['min_len']},max_len:{WORDS['max_len']}}}"
    common = [
        f"+task.options={words}",
        f"task.name={task}",
        f"orchestrator.eval.tasks=[{{name:{task},label:code,verifier:exact,options:{words}}}]",
        "orchestrator.eval.num_examples=128",  # the eval split's all
        f"orchestrator.sampling.temperature={temperature}",
        f"orchestrator.eval.temperature={temperature}",
        f"max_steps={steps}",
        f"orchestrator.eval.interval={min(10, steps)}",
        "orchestrator.log_samples=128",
        "monitor=off",
        f"seed={seed}",
    ]
    if variant == "verifier":
        return [*common, "task.verifier=exact"]
    judge = f"++teachers={{judge:{{kind:local_vllm,model:'{judge_dir}'}}}}"
    return [*common, "task.verifier=judge", judge, "judge.teacher=judge", f"judge.rubric='{TINY_JUDGE_RUBRIC}'"]


def agreement(run_dir: Path, task: str) -> dict:
    """The judge's verdicts on the student's samples against `exact`: the share on the same side of 0.5, its mean
    reward on right and on wrong replies, and its precision (of the replies it passes, >= 0.5, the share right)."""
    right, wrong = [], []
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        s = json.loads(line)
        if s["failed"]:
            continue
        word = s["prompt"].split(f"{task}: ")[1].split("<")[0]
        reply = s["completion"].split("<")[0].strip()
        (right if reply == ANSWERS[task](word) else wrong).append(s["reward"])
    passed_right, passed_wrong = sum(r >= 0.5 for r in right), sum(r >= 0.5 for r in wrong)
    agree = passed_right + len(wrong) - passed_wrong
    n = len(right) + len(wrong)
    return {
        "precision": passed_right / (passed_right + passed_wrong) if passed_right + passed_wrong else None,
        "agreement": agree / n if n else None,
        "judge_on_right": sum(right) / len(right) if right else None,
        "judge_on_wrong": sum(wrong) / len(wrong) if wrong else None,
        "right_share": len(right) / n if n else None,
    }


def run_one(variant: str, seed: int, out: Path, judge_dir: Path, args) -> dict:
    run_dir = out / f"{variant}-{seed}"
    launch = run_launcher(overrides(variant, judge_dir, args.steps, seed, args.task, args.temperature), run_dir)
    train = [r for _, r in launch.train_rows()]
    evals = [r for _, r in launch.eval_rows()]
    record = {
        "ok": launch.ok,
        "code_eval_first": evals[0].get("eval/code/reward") if evals else None,
        "code_eval_last": evals[-1].get("eval/code/reward") if evals else None,
        "step_s": median(r.get("time/step") for r in train[1:]),
        "judge_s": median(r.get("time/judge") for r in train[1:]) if variant == "judge" else None,
        "unparsed": sum(r.get("judge/unparsed", 0) for r in train),
        "curve": [(r["step"], r.get("eval/code/reward")) for r in evals],
    }
    agreed = agreement(run_dir, args.task)  # the verifier's own: 1 by construction, its columns left empty
    return record | (agreed if variant == "judge" else dict.fromkeys(agreed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps of each run")
    parser.add_argument("--task", choices=sorted(ANSWERS), default="reverse", help="the built-in task rl learns")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature, in training and eval")
    args = parser.parse_args()
    out = bench_dir(NAME)
    judge_dir = judge_model(REPO / ".cache" / "bench-models")
    judge_recipe = json.loads((judge_dir / "recipe.json").read_text())
    print(f"judge {judge_dir}: greedy accuracy on its own task {judge_recipe['eval_greedy_reward']}", flush=True)
    per_run, medians = compare_variants(args.runs, VARIANTS, lambda v, seed: run_one(v, seed, out, judge_dir, args))
    keys = ["code_eval_first", "code_eval_last", "step_s", "judge_s", "agreement", "judge_on_right", "judge_on_wrong"]
    keys.append("precision")
    headers = ["reward from", "exact eval, first", f"at step {args.steps}", "step s", "judge s", "agreement"]
    headers += ["judge on right", "judge on wrong", "precision"]
    rows = [[v, *(medians[v].get(k) for k in keys)] for v in VARIANTS]
    print_table(f"rl from a judge vs from exact, {args.task} of 5 letters (medians of {args.runs})", headers, rows)
    record = {
        "task": args.task,
        "temperature": args.temperature,
        "steps": args.steps,
        "judge_accuracy": judge_recipe["eval_greedy_reward"],
        "runs": per_run,
    }
    finish(NAME, record | {"medians": medians}, args.smoke)


if __name__ == "__main__":
    main()

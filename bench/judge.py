"""Rewards from a judge (docs/how-to/judge.md) against the code verifier, on a built-in task of 5-letter words
(reverse, or sort with --task sort), whose code verifier (`exact`) is known: how often the judge's verdict agrees
with `exact` on the student's own samples and how many of the replies it passes are right, rl from the judge against
rl from `exact` at equal steps (both evaluated by `exact`), and what judging costs a step.

The judge: a tiny chat model of four layers warm-started 8000 steps on task=judge over the same words (reverse's
replies, right or wrong, answered yes or no; ~25-45 min to build on the 2-core CPU, once: cached), served by the
launcher as a named local teacher; its reward is P(yes) of its first token. Its rubric shows it the right answer, so
it judges sort's replies as well. Variants: `verifier` (task.verifier=exact) and `judge` (task.verifier=judge). Both
evaluate every 10 steps on an eval task verified by `exact` (eval/code/…).

    .venv/bin/python bench/judge.py --runs 3                # ~7 min once the judge is built
    .venv/bin/python bench/judge.py --runs 3 --task sort
    .venv/bin/python bench/judge.py --runs 1 --smoke --steps 4
"""

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

from common import REPO, add_runs_arg, bench_dir, compare_variants, finish, median, print_table, run_launcher

from prime_rl.config.schema import LrSchedule, TinyModelConfig, WarmStartConfig

NAME = "judge"
WORDS = {"min_len": 5, "max_len": 5}
JUDGE_RUBRIC = "{answer} vs {completion}: same?"  # the built-in judge task's (prime_rl/tasks/builtin.py)
VARIANTS = ("verifier", "judge", "policy judge")
ANSWERS = {"reverse": lambda word: word[::-1], "sort": lambda word: "".join(sorted(word))}  # --task: the right reply
# four layers (two never learnt to compare two strings), 8000 steps (at 3000 it passed more near misses)
JUDGE_MODEL = TinyModelConfig(num_layers=4, num_kv_heads=4)
JUDGE_WARM_START = WarmStartConfig(steps=8000, lr=1e-3, warmup_steps=100, schedule=LrSchedule.cosine)
COLLECT_SEED = 100  # the rl run (from exact) whose replies the policy judge learns from: no compared run's seed
POLICY_JUDGE_STEPS = 1000  # fine-tuning steps of the policy judge (batch 64, lr 3e-4, cosine)


def judge_model(cache: Path) -> Path:
    """The judge's model dir, built once per recipe (cached like every tiny model)."""
    from prime_rl.config.schema import TaskConfig
    from prime_rl.prepare import prepare_model

    return prepare_model("tiny", JUDGE_MODEL, JUDGE_WARM_START, TaskConfig(name="judge", options=WORDS), str(cache))


def overrides(variant: str, judge_dir: Path | None, steps: int, seed: int, task: str) -> list[str]:
    words = f"{{min_len:{WORDS['min_len']},max_len:{WORDS['max_len']}}}"
    common = [
        f"+task.options={words}",
        f"task.name={task}",
        f"orchestrator.eval.tasks=[{{name:{task},label:code,verifier:exact,options:{words}}}]",
        "orchestrator.eval.num_examples=64",
        f"max_steps={steps}",
        f"orchestrator.eval.interval={min(10, steps)}",
        "orchestrator.log_samples=128",
        "monitor=off",
        f"seed={seed}",
    ]
    if variant == "verifier":
        return [*common, "task.verifier=exact"]
    judge = f"++teachers={{judge:{{kind:local_vllm,model:'{judge_dir}'}}}}"
    return [*common, "task.verifier=judge", judge, "judge.teacher=judge", f"judge.rubric='{JUDGE_RUBRIC}'"]


def replies(run_dir: Path, task: str) -> list[tuple[str, str, float]]:
    """The run's logged samples (failed ones left out): (word, reply, reward)."""
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    return [
        (s["prompt"].split(f"{task}: ")[1].split("<")[0], s["completion"].split("<")[0].strip(), s["reward"])
        for s in rows
        if not s["failed"]
    ]


def agreement(run_dir: Path, task: str) -> dict:
    """The judge's verdicts on the student's samples against `exact`: the share on the same side of 0.5, its mean
    reward on right and on wrong replies, and its precision (of the replies it passes, >= 0.5, the share right)."""
    right, wrong = [], []
    for word, reply, reward in replies(run_dir, task):
        (right if reply == ANSWERS[task](word) else wrong).append(reward)
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


def policy_judge(judge_dir: Path, out: Path, steps: int, task: str, smoke: bool) -> Path:
    """The judge fine-tuned on the student's own replies, labelled by `exact`, as a reward model is trained on its
    policy's samples: the replies of an rl run from `exact` on a seed no compared run uses (their wrong ones are the
    near misses the policy makes, which task=judge's made-up slips undersample), each word's right reply as often,
    and task=judge's own examples so that it keeps judging what it learnt there."""
    collect = out / f"collect-{COLLECT_SEED}"
    run_launcher(overrides("verifier", judge_dir, steps, COLLECT_SEED, task), collect)
    pairs = {(word, reply) for word, reply, _ in replies(collect, task)}
    wrong = sorted((word, reply) for word, reply in pairs if reply != ANSWERS[task](word))
    rows = [(ANSWERS[task](word), reply, "no") for word, reply in wrong]
    rows += [(ANSWERS[task](word), ANSWERS[task](word), "yes") for word, _ in wrong]
    lines = [{"prompt": JUDGE_RUBRIC.format(answer=a, completion=c), "answer": v} for a, c, v in rows]
    lines += [{"prompt": ex.prompt, "answer": ex.answer} for ex in judge_task_examples()]
    random.Random(0).shuffle(lines)
    data = out / "policy-judge.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    print(f"policy judge: {len(wrong)} wrong replies of the student, {len(lines)} examples", flush=True)
    target = out / "policy-judge"
    finetune = [
        "--data",
        str(data),
        "--model",
        str(judge_dir),
        "--out",
        str(target),
        "--steps",
        str(10 if smoke else POLICY_JUDGE_STEPS),
    ]
    finetune += ["--batch-size", "64", "--lr", "3e-4", "--warmup-steps", "50", "--schedule", "cosine"]
    subprocess.run([sys.executable, "-m", "prime_rl.finetune", *finetune], cwd=REPO, check=True)
    return target


def judge_task_examples() -> list:
    from prime_rl.config.schema import TaskConfig
    from prime_rl.tasks.registry import load_task

    return load_task(TaskConfig(name="judge", options=WORDS)).train


def run_one(variant: str, seed: int, out: Path, judges: dict[str, Path], steps: int, task: str) -> dict:
    run_dir = out / f"{variant.replace(' ', '-')}-{seed}"
    launch = run_launcher(overrides(variant, judges.get(variant), steps, seed, task), run_dir)
    train = [r for _, r in launch.train_rows()]
    evals = [r for _, r in launch.eval_rows()]
    record = {
        "ok": launch.ok,
        "code_eval_first": evals[0].get("eval/code/reward") if evals else None,
        "code_eval_last": evals[-1].get("eval/code/reward") if evals else None,
        "step_s": median(r.get("time/step") for r in train[1:]),
        "judge_s": median(r.get("time/judge") for r in train[1:]) if variant != "verifier" else None,
        "unparsed": sum(r.get("judge/unparsed", 0) for r in train),
        "curve": [(r["step"], r.get("eval/code/reward")) for r in evals],
    }
    agreed = agreement(run_dir, task)  # the verifier's own: 1 by construction, its columns left empty
    return record | (agreed if variant != "verifier" else dict.fromkeys(agreed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps of each run")
    parser.add_argument("--task", choices=sorted(ANSWERS), default="reverse", help="the built-in task rl learns")
    args = parser.parse_args()
    out = bench_dir(NAME)
    judge_dir = judge_model(REPO / ".cache" / "bench-models")
    judge_recipe = json.loads((judge_dir / "recipe.json").read_text())
    print(f"judge {judge_dir}: greedy accuracy on its own task {judge_recipe['eval_greedy_reward']}", flush=True)
    judges = {"judge": judge_dir, "policy judge": policy_judge(judge_dir, out, args.steps, args.task, args.smoke)}
    per_run, medians = compare_variants(
        args.runs, VARIANTS, lambda v, seed: run_one(v, seed, out, judges, args.steps, args.task)
    )
    keys = ["code_eval_first", "code_eval_last", "step_s", "judge_s", "agreement", "judge_on_right", "judge_on_wrong"]
    keys.append("precision")
    headers = ["reward from", "exact eval, first", f"at step {args.steps}", "step s", "judge s", "agreement"]
    headers += ["judge on right", "judge on wrong", "precision"]
    rows = [[v, *(medians[v].get(k) for k in keys)] for v in VARIANTS]
    print_table(f"rl from a judge vs from exact, {args.task} of 5 letters (medians of {args.runs})", headers, rows)
    record = {
        "task": args.task,
        "steps": args.steps,
        "judge_accuracy": judge_recipe["eval_greedy_reward"],
        "runs": per_run,
    }
    finish(NAME, record | {"medians": medians}, args.smoke)


if __name__ == "__main__":
    main()

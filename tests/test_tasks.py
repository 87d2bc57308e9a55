"""Tasks: the built-in ones, your data through `datasets` (files, dirs, saved datasets, Hub ids from an offline
cache), reasoning-gym, the verifiers (math-verify, your own function), and rewards off the event loop."""

import asyncio
import json
import subprocess
import sys
import time

import pytest

from prime_rl.config.schema import TaskConfig, VerificationConfig
from prime_rl.config.user_error import ConfigError
from prime_rl.orchestrator.evaluation import eval_metrics, pass_at_k
from prime_rl.tasks import Example, load_task
from prime_rl.tasks.reward_workers import Verification, VerifierFailed
from tests.conftest import ROOT

ROWS = [{"question": f"{a}+{a}", "solution": str(2 * a), "id": a} for a in range(10)]


@pytest.mark.parametrize("name", ["reverse", "sort"])
def test_builtin_splits_are_deterministic_and_disjoint(name):
    cfg = TaskConfig(name=name, num_train=500, num_eval=50, seed=3)
    a, b = load_task(cfg), load_task(cfg)
    assert a.train == b.train and a.eval == b.eval
    assert len(a.train) == 500 and len(a.eval) == 50
    assert not {e.prompt for e in a.train} & {e.prompt for e in a.eval}
    assert load_task(TaskConfig(name=name, seed=4)).train[:10] != a.train[:10]


def test_builtin_word_lengths_come_from_the_options():
    task = load_task(TaskConfig(name="reverse", num_train=200, num_eval=20, options={"min_len": 48, "max_len": 64}))
    lengths = {len(ex.answer) for ex in task.train + task.eval}
    assert min(lengths) >= 48 and max(lengths) <= 64 and len(lengths) > 5
    default, explicit = load_task(TaskConfig()), load_task(TaskConfig(options={"min_len": 3, "max_len": 8}))
    assert default.train == explicit.train and default.eval == explicit.eval


@pytest.mark.parametrize(
    "options, words",
    [
        ({"length": 5}, "take no option length"),
        ({"min_len": 9, "max_len": 4}, "not a range"),
        ({"min_len": 1, "max_len": 2}, "too few distinct words"),
    ],
)
def test_builtin_option_mistakes_are_one_line(options, words):
    with pytest.raises(ConfigError) as e:
        load_task(TaskConfig(name="sort", options=options))
    assert e.value.keys[0] == "task.options" and words in str(e.value) and "\n" not in str(e.value)


def test_rewards_are_partial_credit_in_unit_interval():
    task = load_task(TaskConfig(name="reverse", num_train=10, num_eval=2))
    ex = task.train[0]
    assert ex.answer == ex.prompt.removeprefix("reverse: ")[::-1]
    assert task.reward(ex.answer, ex) == 1.0
    assert task.reward("", ex) == 0.0
    assert 0.0 < task.reward(ex.answer[:-1], ex) < 1.0
    sort = load_task(TaskConfig(name="sort", num_train=10, num_eval=2)).train[0]
    assert sort.answer == "".join(sorted(sort.prompt.removeprefix("sort: ")))
    exact = load_task(TaskConfig(name="reverse", num_train=10, num_eval=2, verifier="exact"))
    assert exact.reward(ex.answer[:-1], ex) == 0.0 and exact.reward(f" {ex.answer}\n", ex) == 1.0


def write_files(tmp_path) -> dict[str, str]:
    """The same rows as .jsonl, .csv and .parquet files."""
    import datasets

    rows = datasets.Dataset.from_list(ROWS)
    paths = {"jsonl": tmp_path / "rows.jsonl", "csv": tmp_path / "rows.csv", "parquet": tmp_path / "rows.parquet"}
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    rows.to_csv(paths["csv"])
    rows.to_parquet(paths["parquet"])
    return {k: str(v) for k, v in paths.items()}


def hf(path: str, **fields) -> TaskConfig:
    return TaskConfig(
        **({"name": "hf", "path": path, "prompt_key": "question", "answer_key": "solution", "num_eval": 3} | fields)
    )


def test_hf_task_reads_files_of_every_format_with_a_held_out_eval(tmp_path):
    for kind, path in write_files(tmp_path).items():
        task = load_task(hf(path, system_prompt="Be brief."))
        assert [e.prompt for e in task.train] == [r["question"] for r in ROWS[:7]], kind
        assert [e.answer for e in task.eval] == ["14", "16", "18"], kind  # csv reads numbers: given back as text
        assert task.eval[0].messages == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "7+7"},
        ]


def test_hf_task_reads_a_saved_dataset_and_named_splits(tmp_path):
    import datasets

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS), "test": datasets.Dataset.from_list(ROWS[:2])})
    dd.save_to_disk(tmp_path / "saved")
    task = load_task(hf(str(tmp_path / "saved"), eval_split="test"))
    assert len(task.train) == 10 and [e.prompt for e in task.eval] == ["0+0", "1+1"]


@pytest.mark.integration
def test_hf_task_reads_a_hub_dataset_from_an_offline_cache(tmp_path):
    """A Hub id resolves through huggingface_hub like a model's (the cache a login node filled): no network."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "datasets--lab--toy-math"
    (repo / "snapshots" / sha / "data").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    for split, rows in (("train", ROWS), ("test", ROWS[:4])):
        (repo / "snapshots" / sha / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = (
        "import sys, json; from prime_rl.config.schema import TaskConfig; from prime_rl.tasks import load_task\n"
        "t = load_task(TaskConfig(name='hf', path='lab/toy-math', eval_split='test', prompt_key='question',"
        " answer_key='solution'))\n"
        "print(json.dumps([len(t.train), len(t.eval), t.eval[3].answer]))\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_DATASETS_CACHE": str(tmp_path / "ds")}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env | base_env()
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [10, 4, "6"]


def base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("HF_")}


@pytest.mark.parametrize(
    "fields, keys, words",
    [
        ({"prompt_key": "prompt"}, ["task.prompt_key"], "no column prompt"),
        ({"answer_key": "answer"}, ["task.answer_key"], "its columns: question, solution, id"),
        ({"verifier": "nope"}, ["task.verifier"], "unknown verifier"),
        ({"verifier": "no_such_module:f"}, ["task.verifier"], "cannot import"),
        ({"eval_split": "validation"}, ["task.split", "task.eval_split"], "only split is train"),
    ],
)
def test_hf_task_mistakes_are_one_line_naming_the_key(tmp_path, fields, keys, words):
    path = write_files(tmp_path)["jsonl"]
    with pytest.raises(ConfigError) as e:
        load_task(hf(path, **fields))
    assert e.value.keys == keys and words in str(e.value) and "\n" not in str(e.value)


def test_math_and_contains_and_your_own_verifier(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text("def strict(completion, answer):\n    return completion == answer\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ex = Example("1/2 as a decimal?", "0.5")
    math = load_task(hf(write_files(tmp_path)["jsonl"], verifier="math"))
    assert math.reward("so the answer is $\\boxed{\\frac{1}{2}}$", ex) == 1.0
    assert math.reward("the answer is 0.25", ex) == 0.0
    contains = load_task(hf(write_files(tmp_path)["jsonl"], verifier="contains"))
    assert contains.reward("it is 0.5.", ex) == 1.0
    mine = load_task(hf(write_files(tmp_path)["jsonl"], verifier="my_rewards:strict"))
    assert (mine.reward("0.5", ex), mine.reward(" 0.5", ex)) == (1.0, 0.0)


def test_reasoning_gym_task_holds_out_its_eval_questions_and_scores_with_the_dataset():
    cfg = TaskConfig(name="reasoning_gym", dataset="spell_backward", options={"min_word_len": 3, "max_word_len": 5})
    task = load_task(cfg)
    assert len(task.eval) == 128 and task.train and task.name == "reasoning_gym/spell_backward"
    assert not {e.prompt for e in task.train} & {e.prompt for e in task.eval}
    ex = task.eval[0]
    assert ex.prompt.startswith("Spell this word backward") and 3 <= len(ex.answer) <= 5
    assert task.reward(ex.answer, ex) == 1.0 and task.reward(ex.answer + "x", ex) < 1.0
    for unknown in ({"dataset": "spell_bakward"}, {"dataset": "spell_backward", "options": {"word_length": 3}}):
        with pytest.raises(ConfigError) as e:
            load_task(TaskConfig(name="reasoning_gym", **unknown))
        assert e.value.keys == ["task.dataset", "task.options"], unknown


@pytest.mark.integration
def test_rewards_run_off_the_loop_with_a_time_limit_and_errors_count_as_zero(tmp_path, monkeypatch, capfd):
    """A verifier that hangs costs its samples their time limit, not the run; one that raises gives 0, counted,
    with its first traceback printed; the event loop stays free meanwhile."""
    (tmp_path / "moody.py").write_text(
        "import time\n"
        "def judge(completion, answer):\n"
        "    if completion == 'hang':\n"
        "        time.sleep(60)\n"
        "    if completion == 'boom':\n"
        "        raise KeyError('no such thing')\n"
        "    if completion == 'nan':\n"
        "        return float('nan')\n"
        "    return completion == answer\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    task = TaskConfig(name="reverse", verifier="moody:judge")
    verification = Verification(task, VerificationConfig(workers=2, timeout_s=1.0))
    ex = Example("reverse: ab", "ba")

    async def score() -> tuple[list[float], int]:
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        ticker = asyncio.create_task(tick())
        pairs = [("ba", ex), ("hang", ex), ("boom", ex), ("nan", ex), ("boom", ex), ("x", ex), ("ba", ex)]
        rewards = await verification.rewards(pairs)
        ticker.cancel()
        return rewards, ticks

    try:
        start = time.monotonic()
        rewards, ticks = asyncio.run(score())
        elapsed = time.monotonic() - start
        again = asyncio.run(verification.rewards([("ba", ex)]))  # the hung worker was replaced
        with pytest.raises(VerifierFailed, match="no such thing"):  # the cause, not our wording
            asyncio.run(verification.rewards([("boom", ex), ("hang", ex)]))  # a broken verifier stops the run
    finally:
        verification.close()
    assert rewards == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0] and again == [1.0]
    assert verification.metrics() == {"verifier/calls": 10, "verifier/errors": 4, "verifier/timeouts": 2}
    assert elapsed < 30 and ticks >= 5  # the loop kept running while the verifiers worked
    err = capfd.readouterr().err
    assert err.count("KeyError: 'no such thing'") == 1  # the failing verifier's own error, logged once


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 4) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # all 3 draws among the 3 wrong: C(3,3)/C(5,3)
    assert pass_at_k(5, 1, 3) == pytest.approx(1 - 4 / 10)
    rewards = [1.0, 0.0, 0.0, 0.0] + [0.5, 0.5, 1.0, 1.0]  # two prompts, k = 4
    m = eval_metrics(rewards, 4)
    assert m["eval/reward"] == m["eval/avg@4"] == pytest.approx(0.5)
    assert m["eval/pass@1"] == pytest.approx((0.25 + 0.5) / 2) and m["eval/pass@4"] == 1.0
    assert m["eval/reward_stderr"] == pytest.approx(0.25)  # prompt means 0.25 and 0.75: stdev 0.354 / sqrt(2)
    assert set(m) == {
        "eval/reward",
        "eval/reward_stderr",
        "eval/exact",
        "eval/avg@4",
        "eval/pass@1",
        "eval/pass@2",
        "eval/pass@4",
    }
    assert set(eval_metrics([1.0] * 6, 6)) >= {"eval/pass@4", "eval/pass@6"}


def test_a_task_mix_draws_by_weight_and_scores_each_source_with_its_own_verifier(tmp_path):
    from prime_rl.config import compose_config
    from prime_rl.orchestrator.prompts import step_prompts

    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1", "answer": str(a + 1)}) + "\n" for a in range(2000)))
    cfg = compose_config(
        [
            "task=mix",
            f"task.mix=[{{name:reverse,weight:1}},{{name:jsonl,path:'{data}',verifier:exact,weight:3}}]",
            "orchestrator.batch_size=1024",
            "orchestrator.rollouts_per_example=2",
        ]
    )
    task = load_task(cfg.task)
    assert task.weights == {"reverse": 1.0, "sums": 3.0}
    assert {ex.source for ex in task.eval[:2]} == {"reverse", "sums"}  # interleaved: any prefix covers both
    drawn = step_prompts(cfg, task, step=0)
    assert drawn == step_prompts(cfg, task, step=0) and len(drawn) == 512 == len(set(drawn))
    share = sum(ex.source == "sums" for ex in drawn) / len(drawn)
    assert 0.68 < share < 0.82  # 3 : 1
    word = next(ex for ex in task.eval if ex.source == "reverse")
    number = next(ex for ex in task.eval if ex.source == "sums")
    assert 0 < task.reward(word.answer[:-1], word) < 1  # reverse keeps its partial credit
    assert task.reward(number.answer + "0", number) == 0.0 and task.reward(number.answer, number) == 1.0


def test_mix_mistakes_name_the_source():
    from prime_rl.config import ConfigError, compose_config
    from prime_rl.launcher.preflight import check_at_launch

    with pytest.raises(ConfigError) as err:
        check_at_launch(compose_config(["task=mix", "task.mix=[{name:sort},{name:reasoning_gym,dataset:nope}]"]), 0)
    assert err.value.keys == ["task.mix[1].dataset", "task.mix[1].options"]
    with pytest.raises(ConfigError) as err:
        check_at_launch(compose_config(["task=mix", "task.mix=[{name:sort,weight:0}]"]), 0)
    assert err.value.keys == ["task.mix[0].weight"]

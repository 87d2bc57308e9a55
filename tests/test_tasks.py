"""Built-in tasks and the JSONL format."""

import pytest

from prime_rl.config.schema import TaskConfig
from prime_rl.tasks import load_task
from prime_rl.tasks.task import read_jsonl


@pytest.mark.parametrize("name", ["reverse", "sort"])
def test_builtin_splits_are_deterministic_and_disjoint(name):
    cfg = TaskConfig(name=name, num_train=500, num_eval=50, seed=3)
    a, b = load_task(cfg), load_task(cfg)
    assert a.train == b.train and a.eval == b.eval
    assert len(a.train) == 500 and len(a.eval) == 50
    assert not {e.prompt for e in a.train} & {e.prompt for e in a.eval}
    assert load_task(TaskConfig(name=name, seed=4)).train[:10] != a.train[:10]


def test_rewards_are_partial_credit_in_unit_interval():
    task = load_task(TaskConfig(name="reverse", num_train=10, num_eval=2))
    ex = task.train[0]
    assert ex.answer == ex.prompt.removeprefix("reverse: ")[::-1]
    assert task.reward(ex.answer, ex) == 1.0
    assert task.reward("", ex) == 0.0
    assert 0.0 < task.reward(ex.answer[:-1], ex) < 1.0
    sort = load_task(TaskConfig(name="sort", num_train=10, num_eval=2)).train[0]
    assert sort.answer == "".join(sorted(sort.prompt.removeprefix("sort: ")))


def test_jsonl_task_reads_prompt_and_answer_or_solution(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(
        '{"prompt": "2+2", "answer": "4"}\n\n{"prompt": "3+3", "solution": 6}\n{"prompt": "1+1", "answer": "2"}\n'
    )
    task = load_task(TaskConfig(name="jsonl", path=str(path), num_eval=1))
    assert [e.prompt for e in task.train] == ["2+2", "3+3"] and task.train[1].answer == "6"
    assert [e.prompt for e in task.eval] == ["1+1"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_jsonl(bad)

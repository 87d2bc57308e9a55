"""The teacher-signal store (teacher/score_store.py): what a teacher said about token sequences, read back for the same
teacher, tokens and k only; a teacher whose files changed misses; the store stays under its bound, dropping what was
read least recently; writers and a sweep at once leave only whole entries. The store in a real run, counted by the
requests its teacher got: tests/test_cross_tokenizer.py."""

import os
import subprocess
import sys
import time

import pytest

from prime_rl.config import ConfigError, check_rules, compose_config
from prime_rl.inference.client import TopLogprobs
from prime_rl.teacher.cache import TeacherCache
from prime_rl.teacher.client import teacher_identity
from prime_rl.teacher.score_store import KIND, ScoreStore
from tests.conftest import ROOT

PAIR = ([1, 2, 3], [4, 5])
SCORE = ([-0.5, -1.25], None)
TOP = ([-0.5, -1.25], TopLogprobs([[4, 9], [5, 7]], [[-0.5, -2.0], [-1.25, -1.5]]))


def test_a_stored_score_is_read_back_for_the_same_teacher_tokens_and_k_only(tmp_path):
    store = ScoreStore(TeacherCache(tmp_path, "teacher a"), 0)
    store.put("m", PAIR, 0, SCORE)
    store.put("m", PAIR, 2, TOP)
    assert store.get("m", PAIR, 0) == SCORE
    logprobs, top = store.get("m", PAIR, 2)
    assert logprobs == TOP[0] and (top.ids, top.logprobs) == (TOP[1].ids, TOP[1].logprobs)
    assert store.get("m", PAIR, 3) is None  # another k
    assert store.get("m", ([1, 2], [3, 4, 5]), 0) is None  # the same tokens, split elsewhere
    assert store.get("other", PAIR, 0) is None  # another served model
    assert ScoreStore(TeacherCache(tmp_path, "teacher b"), 0).get("m", PAIR, 0) is None  # another teacher
    assert store.counts.written > 0 and len(list((tmp_path / KIND).rglob("*.json"))) == 2


def test_a_local_teachers_identity_changes_with_its_files_dtype_and_server_arguments(tmp_path):
    model = tmp_path / "teacher"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    args = ["training_mode=opd", "teacher=local_vllm", f"teacher.model={model}"]
    first = teacher_identity(compose_config(args))
    assert teacher_identity(compose_config(args)) == first
    assert teacher_identity(compose_config([*args, "inference.dtype=bfloat16"])) != first
    assert teacher_identity(compose_config([*args, "teacher.extra_args=[--quantization,fp8]"])) != first
    time.sleep(0.01)
    (model / "model.safetensors").write_bytes(b"weights")  # rewritten in place: the same path, other weights
    assert teacher_identity(compose_config(args)) != first


def test_the_store_keeps_under_its_bound_dropping_what_was_read_least_recently(tmp_path):
    cache = TeacherCache(tmp_path, "teacher")
    entry = ScoreStore(cache, 0)
    entry.put("m", PAIR, 0, SCORE)
    size = entry.counts.written
    store = ScoreStore(cache, 10 * size)
    pairs = [([i], [i + 1]) for i in range(40)]
    for i, pair in enumerate(pairs):
        store.put("m", pair, 0, SCORE)
        os.utime(cache.path(KIND, store.question("m", pair, 0)), ns=(i * 10**9, i * 10**9))  # written in order
        assert store.get("m", PAIR, 0) == SCORE  # read after every write: the most recently read
    held = sum(p.stat().st_size for p in (tmp_path / KIND).rglob("*.json"))
    assert held <= 10 * size + size  # the sweep leaves 90 % of the bound, and one entry may follow it
    kept = [pair for pair in pairs if store.get("m", pair, 0) is not None]
    assert kept == pairs[-len(kept) :] and 0 < len(kept) < len(pairs)  # the newest ones
    assert store.get("m", PAIR, 0) == SCORE


@pytest.mark.integration
def test_writers_and_their_sweeps_at_once_leave_only_whole_entries(tmp_path):
    """Two jobs share a bounded store: both write and sweep it at once, and a reader meanwhile sees each entry
    absent or whole."""
    writer = (
        "import sys; from pathlib import Path\n"
        "from prime_rl.teacher.cache import TeacherCache; from prime_rl.teacher.score_store import ScoreStore\n"
        "store = ScoreStore(TeacherCache(Path(sys.argv[1]), 'teacher'), 400_000)\n"
        "for round in range(30):\n"
        "    for i in range(20):\n"
        "        store.put('m', ([i], [i]), 0, ([float(i)] * 4000, None))\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", writer, str(tmp_path)], cwd=ROOT) for _ in range(2)]
    store, seen = ScoreStore(TeacherCache(tmp_path, "teacher"), 0), set()
    while any(w.poll() is None for w in writers):
        for i in range(20):
            score = store.get("m", ([i], [i]), 0)
            assert score is None or score == ([float(i)] * 4000, None)
            seen.add(score is not None)
    assert [w.returncode for w in writers] == [0, 0] and seen == {True, False}  # evicted and written again
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_a_bound_without_a_store_is_one_line():
    with pytest.raises(ConfigError) as err:
        check_rules(compose_config(["training_mode=opd", "teacher=local_vllm", "teacher.cache_max_gib=1"]), 0)
    assert err.value.keys == ["teacher.cache_max_gib", "teacher.cache_dir"]

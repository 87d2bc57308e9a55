"""What a step trains on (issue 30). Dynamic sampling: a group of equal rewards carries no signal in rl; with the
filter on the step drops it and refills its place with a new prompt's group, in bounded rounds of prompts that are a
function of (seed, step, round). The difficulty filter: a prompt whose group passed too rarely or too often waits.
Length shaping: DAPO's soft overlong penalty and overlong filter. Their arithmetic against stand-ins, the draw, the
rules, and one real rl run with dynamic sampling, the overlong filter and the difficulty filter, across a crash and
a resume."""

import asyncio
import json
import random
import re
import shutil

import pytest

from prime_rl.config import ConfigError, compose_config
from prime_rl.config.rules import check_rules
from prime_rl.orchestrator.advantages import grpo_advantages
from prime_rl.orchestrator.difficulty import DifficultyFilter
from prime_rl.orchestrator.dynamic_sampling import group_metrics, refill, uniform
from prime_rl.orchestrator.length_shaping import overlong_penalty, shaped_rewards
from prime_rl.orchestrator.prompts import prompts_per_step, refill_prompts, step_prompts
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example, Task, load_task
from tests.test_e2e_rl import launch, plan_of, rows

N = 4  # samples per group
USER_TURN = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S)


def group(rewards: list[float], prompt: int = 0) -> list[Sample]:
    """A scored group: its rewards and their GRPO advantages."""
    advantages = grpo_advantages(rewards, [len(rewards)], std_normalize=True)
    return [Sample([prompt], [1], [0.0], advantage=a, reward=r) for r, a in zip(rewards, advantages)]


def task(size: int = 100) -> Task:
    return Task("t", [Example(str(i), "") for i in range(size)], [], verify=lambda c, ex: 0.0)


def signal_of(ex: Example) -> list[Sample]:
    """A stand-in sampler's group for a prompt: every third prompt's group is uniform (all wrong)."""
    i = int(ex.prompt)
    return group([0.0] * N if i % 3 == 0 else [0.0, 1.0, 0.0, 0.0], prompt=i)


def test_group_metrics_count_the_groups_without_signal():
    groups = [group([1.0] * N), group([0.0] * N), group([0.1] * N), group([0.0, 1.0, 1.0, 1.0])]
    assert [uniform(g) for g in groups] == [True, True, True, False]
    assert group_metrics(groups) == {"groups/uniform": 0.75, "groups/all_exact": 0.25, "groups/all_zero": 0.25}


def test_the_refill_replaces_uniform_groups_with_new_prompts_groups():
    cfg = compose_config(["orchestrator.dynamic_sampling.enabled=true", "orchestrator.batch_size=32"])
    t = task()
    examples = [t.train[i] for i in (0, 1, 3, 4, 6, 7, 9, 10)]  # 4 of 8 uniform (0, 3, 6, 9)
    asked = []

    async def sample(more: list[Example]) -> list[list[Sample]]:
        asked.append(more)
        return [signal_of(ex) for ex in more]

    groups, metrics = asyncio.run(refill(cfg, t, 5, examples, [signal_of(ex) for ex in examples], sample))
    assert len(groups) == 8 and not any(map(uniform, groups))
    assert [g[0].prompt_ids[0] for g in groups][:4] == [1, 4, 7, 10]  # the step's own useful groups first
    drawn = {ex.prompt for more in asked for ex in more}
    assert not drawn & {ex.prompt for ex in examples}  # no prompt twice in a step
    # round 1 asks for 4 missing / a keep rate of 1/2 = 8 prompts; 2 more rounds at most
    assert len(asked[0]) == 8 and len(asked) <= 3
    assert metrics["sampling/extra_prompts"] == sum(map(len, asked)) and metrics["sampling/unfilled"] == 0
    assert metrics["sampling/filtered"] == pytest.approx(
        sum(map(uniform, [signal_of(ex) for ex in examples + [ex for m in asked for ex in m]]))
        / (8 + sum(map(len, asked)))
    )


def test_a_step_with_no_refill_left_keeps_its_size_with_the_uniform_groups():
    cfg = compose_config(["orchestrator.dynamic_sampling.enabled=true", "orchestrator.dynamic_sampling.max_refills=1"])
    t = task(size=10)
    examples = t.train[:8]

    async def all_wrong(more: list[Example]) -> list[list[Sample]]:
        return [group([0.0] * N, int(ex.prompt)) for ex in more]

    groups, metrics = asyncio.run(refill(cfg, t, 0, examples, [signal_of(ex) for ex in examples], all_wrong))
    assert len(groups) == 8 and sum(map(uniform, groups)) == 3  # prompts 0, 3, 6 fill what no refill found
    assert metrics["sampling/extra_prompts"] == 2  # the task had only 2 prompts the step had not drawn
    assert metrics["sampling/unfilled"] == 3 / 8


def test_refill_prompts_are_a_function_of_seed_step_and_round_and_avoid_the_steps_own():
    cfg, t = compose_config(), task()
    own = step_prompts(cfg, t, 7)
    first = refill_prompts(cfg, t, 7, 1, own, 5)
    assert first == refill_prompts(cfg, t, 7, 1, own, 5) and len(first) == 5  # a resumed step draws the same
    assert first != refill_prompts(cfg, t, 7, 2, own, 5) and first != refill_prompts(cfg, t, 8, 1, own, 5)
    assert not {ex.prompt for ex in first} & {ex.prompt for ex in own}
    # the step's own draw is what it was before refills existed
    assert own == random.Random(cfg.seed * 1_000_003 + 7).sample(t.train, len(own))


def test_the_difficulty_filter_holds_back_what_always_failed_or_passed_and_a_resume_rebuilds_it(tmp_path):
    cfg = compose_config(["orchestrator.difficulty.enabled=true", "orchestrator.difficulty.skip_steps=3"])
    t, log = task(), tmp_path / "difficulty.jsonl"
    judge = DifficultyFilter(cfg.orchestrator.difficulty, t, log)
    hard, easy, mixed = t.train[:2], t.train[2:3], t.train[3:5]
    judge.judge([*hard, *easy], [group([0.0, 0.4, 0.9, 0.0]), group([0.0] * N), group([1.0] * N)])
    judge.judge(mixed, [group([1.0, 0.0, 0.0, 0.0]), group([1.0, 1.0, 1.0, 0.5])])  # a refill's groups count too
    metrics = judge.close_step(step=4, waited=0)
    assert metrics == {"difficulty/too_hard": 2 / 5, "difficulty/too_easy": 1 / 5, "difficulty/waiting": 0.0}
    per_step = prompts_per_step(cfg)
    assert judge.waiting(5, per_step) == [*hard, *easy] and judge.waiting(7, per_step) == [*hard, *easy]
    assert judge.waiting(8, per_step) == []  # skip_steps=3: steps 5, 6 and 7 do not draw them
    assert not set(map(id, step_prompts(cfg, t, 5, judge.waiting(5, per_step)))) & set(map(id, [*hard, *easy]))
    assert len(judge.waiting(5, draws=len(t.train) - 1)) == 1  # never so many that a step cannot fill its batch

    resumed = DifficultyFilter(cfg.orchestrator.difficulty, t, log)
    resumed.resume(start=5)  # from the run dir's rows before the resumed step
    assert resumed.waiting(5, per_step) == judge.waiting(5, per_step)
    fresh = DifficultyFilter(cfg.orchestrator.difficulty, t, log)
    fresh.resume(start=4)  # step 4 is recomputed: its verdicts are not the resumed run's
    assert fresh.waiting(5, per_step) == []


def test_the_difficulty_filter_is_refused_without_rewards_or_on_the_teachers_answers():
    for overrides, key in (
        (["orchestrator.verification.enabled=false", "training_mode=opd", "teacher=local_vllm"], "verification"),
        (["training_mode=sft", "teacher=local_vllm"], "training_mode"),
        (["orchestrator.difficulty.min_pass_rate=0.5", "orchestrator.difficulty.max_pass_rate=0.5"], "max_pass"),
    ):
        cfg = compose_config([*overrides, "orchestrator.difficulty.enabled=true", "trainer.loss.adv_tau=0"])
        with pytest.raises(ConfigError) as err:
            check_rules(cfg, 0)
        assert any(key in k for k in err.value.keys), (overrides, err.value.keys)


def test_the_filter_is_refused_where_every_group_carries_a_signal():
    for overrides in (["training_mode=opd", "teacher=local_vllm"], ["training_mode=sft", "teacher=local_vllm"]):
        cfg = compose_config([*overrides, "orchestrator.dynamic_sampling.enabled=true"])
        with pytest.raises(ConfigError) as err:
            check_rules(cfg, 0)
        assert "orchestrator.dynamic_sampling.enabled" in err.value.keys, overrides


def test_the_overlong_penalty_falls_linearly_over_the_buffer():
    assert [overlong_penalty(n, 16, 4, 1.0) for n in (3, 12, 13, 14, 16, 20)] == [0, 0, 0.25, 0.5, 1.0, 1.0]
    assert overlong_penalty(16, 16, 0, 1.0) == 0 and overlong_penalty(15, 16, 4, 0.5) == 0.375


def test_shaping_lowers_the_rewards_advantages_see_and_masks_cut_replies():
    cfg = compose_config(
        [
            "orchestrator.sampling.max_tokens=8",
            "orchestrator.length.overlong_buffer=4",
            "orchestrator.length.mask_truncated=true",
        ]
    )
    samples = [Sample([0], [1] * n, [0.0] * n, truncated=n == 8) for n in (2, 6, 8)]
    episode = Sample([0], [1] * 8, [0.0] * 8, loss_mask=[True] * 4 + [False] * 4)  # an episode: not shaped
    shaped, metrics = shaped_rewards(cfg, [*samples, episode], [1.0, 1.0, 0.0, 1.0])
    assert shaped == [1.0, 0.5, -1.0, 1.0]  # 6 tokens: 2 of the 4-token buffer; 8: all of it
    assert metrics == {"reward/overlong_penalty": pytest.approx(1.5 / 4), "seq_len/masked_truncated": 0.25}
    assert [s.loss_mask for s in samples] == [None, None, [False] * 8] and episode.loss_mask[0]


def test_length_shaping_is_refused_on_the_teachers_replies_and_past_max_tokens():
    for overrides, key in [
        (["training_mode=sft", "teacher=local_vllm", "orchestrator.length.mask_truncated=true"], "orchestrator.length"),
        (["orchestrator.length.overlong_buffer=16"], "orchestrator.length.overlong_buffer"),  # max_tokens is 16
    ]:
        with pytest.raises(ConfigError) as err:
            check_rules(compose_config(overrides), 0)
        assert key in err.value.keys, overrides


@pytest.mark.vllm
def test_an_rl_run_refills_masks_cut_replies_and_holds_prompts_back_across_a_resume(tmp_path, standing_servers):
    """Exact-match rewards on the warm-started tiny model, whose replies 6 tokens often cut: most groups are all
    wrong, so dynamic sampling refills them, every cut reply trains on nothing, and the difficulty filter holds the
    all-wrong prompts back for the rest of the run (refills judged too). A crash after step 2's checkpoint (the later
    one removed) and a resume: the resumed run rebuilds the verdicts of steps 0-1 from the run dir, redraws steps
    2-3 and goes on, never drawing a held-back prompt; every step is judged once."""
    run_dir = tmp_path / "run"
    common = [
        "task.verifier=exact", "orchestrator.dynamic_sampling.enabled=true", "orchestrator.length.mask_truncated=true",
        "orchestrator.sampling.max_tokens=6", "orchestrator.difficulty.enabled=true",
        "orchestrator.difficulty.skip_steps=100", "orchestrator.batch_size=16", "orchestrator.rollouts_per_example=4",
        "orchestrator.eval.interval=0", "orchestrator.log_samples=64", "ckpt.interval=2", "monitor=off",
    ]  # fmt: skip
    first = launch(run_dir, *common, "max_steps=4", standing=standing_servers)
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.rmtree(run_dir / "checkpoints" / "step_4")
    resumed = launch(run_dir, *common, "max_steps=6", "ckpt.resume=true", standing=standing_servers)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert plan_of(run_dir)["resume_from"] == 2

    judged = [json.loads(line) for line in (run_dir / "difficulty.jsonl").read_text().splitlines()]
    assert [r["step"] for r in judged] == list(range(6))
    train = load_task(compose_config(common).task).train
    places: dict[str, set[int]] = {}  # a prompt's text -> its places in the train split (a word may repeat)
    for i, ex in enumerate(train):
        places.setdefault(ex.prompt, set()).add(i)
    steps = {r["step"]: r for r in rows(run_dir) if "loss" in r}
    assert sorted(steps) == list(range(6))
    assert all(0 < r["groups/uniform"] <= 1 and r["time/refill"] >= 0 for r in steps.values())
    assert sum(r["sampling/extra_prompts"] for r in steps.values()) > 0  # uniform groups were replaced by new prompts
    for r in steps.values():  # what was filtered is what the step sampled uniform, first draw and refills together
        assert r["sampling/filtered"] > 0 and r["sampling/unfilled"] <= r["groups/uniform"]
        assert r["seq_len/masked_truncated"] == r["seq_len/truncated"]  # the step's own replies: every cut one
    assert any(r["seq_len/truncated"] > 0 for r in steps.values())
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    held: set[int] = set()
    for row in judged:
        assert steps[row["step"]]["difficulty/waiting"] == len(held)  # every earlier verdict, across the resume
        for s in samples:
            if s["step"] == row["step"]:
                text = USER_TURN.search(s["prompt"]).group(1)
                assert places[text] - held, f"step {row['step']} drew {text!r}, held back"
        held |= set(row["too_hard"] + row["too_easy"])
    assert len(held) > 0

"""Monitoring: the W&B run read back from W&B's own offline files, plots, and the sweep report."""

import csv
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hydra.types import RunMode
from omegaconf import OmegaConf
from wandb.proto import wandb_internal_pb2

from prime_rl.config import compose_config
from prime_rl.config.schema import Config, MonitorConfig, WandbConfig, WandbMode
from prime_rl.launcher.job import with_sweep_names
from prime_rl.monitor.plots import write_plots
from prime_rl.monitor.wandb_run import RUN_ID_FILE, WandbRun, logged_config, run_tags, wandb_mode
from prime_rl.protocol.batch import TEACHER_LOGPROBS, Sample
from prime_rl.protocol.run_dir import RunDir
from prime_rl.report.__main__ import main as report_main
from prime_rl.report.sweep import Job, label_of
from prime_rl.report.workspace import SECTIONS, run_workspace, sweep_workspace
from tests.conftest import ROOT, launch_cmd, unused_port
from tests.test_e2e_rl import launch, plan_of, run_processes

SECRET_ENV = "PRIME_RL_TEST_MONITOR_SECRET"
SECRET = "sk-monitor-test-6f1d2c9a"  # must appear in no file of a run dir


# --- W&B's offline files ---------------------------------------------------------------------------------------
# A run-<id>.wandb file is a 7-byte header (":W&B", magic, version) then LevelDB-log chunks in 32 KiB blocks:
# crc32 (u32), length (u16), type (u8: 1 full, 2 first, 3 middle, 4 last); a block's tail shorter than a chunk
# header is padding. Each reassembled record is a wandb_internal_pb2.Record (wandb 0.31 ships no Python reader).
BLOCK, HEADER = 32768, 7


def wandb_records(path: Path) -> Iterator[wandb_internal_pb2.Record]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        parts += data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind in (1, 4):  # a record is complete
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def complete_records(path: Path, timeout_s: float = 60.0) -> list[wandb_internal_pb2.Record]:
    """The file's records once its `exit` record is in: W&B's service may still be writing after finish()."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


class OfflineRun:
    """One offline-run-* dir: the run record (id, group, name, tags, config) and the history by step."""

    def __init__(self, path: Path):
        self.path = path
        records = complete_records(next(path.glob("run-*.wandb")))
        self.run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        self.config = {u.key: json.loads(u.value_json) for u in self.run.config.update}
        self.metrics = {r.metric.name or r.metric.glob_name: r.metric for r in records if r.HasField("metric")}
        self.history: dict[int, dict] = {}
        for r in records:
            if r.WhichOneof("record_type") == "history":
                row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
                self.history.setdefault(row["_step"], {}).update(row)

    def steps_with(self, key: str) -> list[int]:
        return sorted(step for step, row in self.history.items() if key in row)


def offline_runs(run_dir: Path) -> list[OfflineRun]:
    """In start order (dir names hold the start time to the second only)."""
    runs = [OfflineRun(p) for p in (run_dir / "wandb").glob("offline-run-*")]
    return sorted(runs, key=lambda r: (r.run.start_time.seconds, r.run.start_time.nanos))


def files_containing(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


# --- W&B unit tests (no servers) --------------------------------------------------------------------------------


class CharTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def offline_cfg(run_dir: Path, **wandb) -> Config:
    monitor = MonitorConfig(wandb=WandbConfig(mode=WandbMode.offline, **wandb), samples_interval=2, num_samples=3)
    cfg = compose_config(["training_mode=opd", "orchestrator.eval.interval=2", "max_steps=3"])
    return replace(cfg, run_dir=str(run_dir), monitor=monitor)


def opd_samples(n: int) -> list[Sample]:
    return [
        Sample([0, 1], [2, 3], [-0.5, -1.5], 0.1 * i, 0.5, streams={TEACHER_LOGPROBS: [-1.0, -2.0]}) for i in range(n)
    ]


@pytest.mark.integration
@pytest.mark.slow
def test_wandb_run_logs_steps_samples_and_the_final_eval_and_reuses_its_id_on_resume(tmp_path):
    cfg = offline_cfg(tmp_path, group="g", name="n", tags=["extra"])
    first = WandbRun(cfg, resumed=False)
    for step in range(3):
        first.log_step({"step": step, "reward/mean": 0.5, "loss": 1.0 - step}, opd_samples(5), CharTokenizer())
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 3, "eval/reward": 0.75}) + "\n")  # the orchestrator's
    first.finish()
    time.sleep(1.1)  # W&B names offline dirs by the second: the resumed run of the same id needs its own
    second = WandbRun(cfg, resumed=True)
    second.finish()
    time.sleep(1.1)
    third = WandbRun(cfg, resumed=False)  # restarting from step 0: a new run
    third.finish()

    [one, two, three] = offline_runs(tmp_path)
    assert one.run.run_id == two.run.run_id != three.run.run_id
    assert (tmp_path / RUN_ID_FILE).read_text().strip() == three.run.run_id
    assert (one.run.run_group, one.run.display_name) == ("g", "n")
    assert list(one.run.tags) == ["mode:opd", "teacher:local_vllm", "lora:off", "extra"]
    assert one.config["max_steps"] == 3 and one.config["training_mode"] == "opd"
    assert one.steps_with("loss") == [0, 1, 2] and one.history[2]["loss"] == -1.0
    assert one.steps_with("eval/reward") == [3] and one.history[3]["eval/step"] == 3
    # eval panels on their own axis (the steps that evaluated), the best and the last eval reward in the summary
    assert one.metrics["eval/*"].step_metric == one.metrics["eval/reward"].step_metric == "eval/step"
    assert (one.metrics["eval/reward"].summary.max, one.metrics["eval/reward"].summary.last) == (True, True)
    assert "eval/step" not in one.history[2]
    assert one.steps_with("samples/_type") == [0, 2]  # samples_interval=2
    [table_file, _] = sorted((one.path / "files" / "media" / "table").glob("samples_*.table.json"))
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["prompt", "completion", "reward", "advantage", "logprob_mean", "teacher_logprob_mean"]
    assert table["data"][1] == ["ab", "cd", 0.5, 0.1, -1.0, -1.5]  # num_samples=3 rows
    assert len(table["data"]) == 3


def test_disabled_wandb_writes_nothing(tmp_path):
    cfg = replace(offline_cfg(tmp_path), monitor=MonitorConfig(wandb=WandbConfig(mode=WandbMode.disabled)))
    run = WandbRun(cfg, resumed=False)
    run.log_step({"step": 0, "loss": 1.0}, opd_samples(1), CharTokenizer())
    run.finish()
    assert list(tmp_path.iterdir()) == []


def test_auto_mode_follows_the_api_key_and_wandb_mode(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert wandb_mode(WandbMode.auto) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode(WandbMode.auto) == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode(WandbMode.auto) == "disabled"
    assert wandb_mode(WandbMode.offline) == "offline"


def test_tags_and_logged_config_without_header_values():
    cfg = compose_config(
        [
            "training_mode=sft",
            "teacher=external",
            "teacher.base_url=https://x/v1",
            "teacher.model=m",
            "+teacher.headers.X-Org=org-1",
            "lora=on",
            "monitor.wandb.tags=[a]",
        ]
    )
    assert run_tags(cfg) == ["mode:sft", "teacher:external", "lora:on", "a"]
    config = logged_config(cfg)
    assert config["teacher"]["headers"] == {"X-Org": "<redacted>"}
    assert config["trainer"]["lora"]["enabled"] is True and config["training_mode"] == "sft"


def test_multirun_names_the_run_after_its_overrides_and_groups_it_by_sweep():
    hydra = OmegaConf.create(
        {
            "mode": RunMode.MULTIRUN,
            "sweep": {"dir": "multirun/2026-01-31/12-00-00"},
            "job": {"override_dirname": "trainer.optim.lr=0.001"},
        }
    )
    w = with_sweep_names(compose_config(), hydra).monitor.wandb
    assert (w.group, w.name) == ("2026-01-31/12-00-00", "trainer.optim.lr=0.001")
    w = with_sweep_names(compose_config(["monitor.wandb.group=mine", "monitor.wandb.name=me"]), hydra).monitor.wandb
    assert (w.group, w.name) == ("mine", "me")  # the user's choice wins
    hydra.mode = RunMode.RUN
    assert with_sweep_names(compose_config(), hydra).monitor.wandb.group is None


# --- plots and report on handmade metrics ----------------------------------------------------------------------


def fake_metrics(run_dir: Path, steps: int, lr: float, opd: bool = False) -> None:
    rows = []
    for step in range(steps):
        row = {
            "step": step,
            "reward/mean": 0.4 + lr * 100 * step,
            "loss": 1.0 / (step + 1),
            "time/step": 0.5,
            "throughput/tokens_per_s": 1000.0,
            "throughput/generate_tokens_per_s": 1500.0,
        }
        if opd:
            row["teacher_kl"] = 5.0 - step
        if step % 2 == 0:
            row["eval/reward"] = row["reward/mean"]
        rows.append(row)
    rows.append({"step": steps, "eval/reward": 0.4 + lr * 100 * steps})
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("opd", [False, True])
def test_run_plots(tmp_path, opd):
    fake_metrics(tmp_path, 6, 1e-3, opd=opd)
    written = write_plots(tmp_path)
    names = ["reward", "loss", "teacher_kl", "throughput"] if opd else ["reward", "loss", "throughput"]
    assert [p.name for p in written] == [f"{n}.png" for n in names]
    assert all(p.read_bytes().startswith(b"\x89PNG") and p.stat().st_size > 5000 for p in written)


def fake_sweep(sweep: Path) -> None:
    for num, lr in enumerate([1e-3, 3e-3, 1e-2, 3e-2]):
        job = sweep / str(num)
        fake_metrics(job, 4, lr)
        (job / ".hydra").mkdir()
        (job / ".hydra" / "overrides.yaml").write_text(f"- max_steps=4\n- trainer.optim.lr={lr}\n")
        if num < 2:  # the last two did not finish: one still runs (or was killed), one failed
            (job / "summary.json").write_text(json.dumps({"steps": 4, "eval/reward_final": 0.4 + lr * 400}))
        if num == 3:
            failed = {"status": "failed", "role": "trainer", "reason": "failed (exit code 1)", "exit_code": 1}
            RunDir(job).outcome().write_text(json.dumps({**failed, "signal": None}))


def test_report_on_a_handmade_sweep(tmp_path, capsys):
    fake_sweep(tmp_path)
    assert report_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "report.csv").open()))
    assert [(r["job"], r["status"], float(r["trainer.optim.lr"])) for r in rows] == [
        ("0", "done", 1e-3),
        ("1", "done", 3e-3),
        ("2", "incomplete", 1e-2),
        ("3", "failed (trainer)", 3e-2),
    ]
    assert "trainer.optim.lr" in out  # the table, printed
    assert "max_steps" not in rows[0]  # the same in every job: not swept
    assert float(rows[2]["eval/reward_final"]) == pytest.approx(0.4 + 1e-2 * 400)  # from metrics.jsonl
    for name in ("report_eval_reward_final_vs_trainer_optim_lr.png", "report_reward_curves.png"):
        assert (tmp_path / name).stat().st_size > 5000


def test_report_labels_name_a_key_by_its_last_part_when_unambiguous(tmp_path):
    keys = ["trainer.optim.lr", "trainer.loss.teacher_tau", "orchestrator.eval.temperature", "teacher.temperature"]
    job = Job(tmp_path, {"trainer.optim.lr": 3e-3, "orchestrator.eval.temperature": 0.5}, [], {}, "done")
    # teacher_tau is not set by this job (it runs the default): left out; "temperature" is ambiguous: in full
    assert label_of(job, keys) == "lr=0.003, orchestrator.eval.temperature=0.5"


def test_report_on_a_dir_without_jobs_exits_2(tmp_path, capsys):
    assert report_main([str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.splitlines()  # one line, naming the dir it found no jobs in
    assert line.startswith("error: ") and str(tmp_path) in line


# --- real runs (vLLM server, orchestrator, trainer) -------------------------------------------------------------


@pytest.fixture
def offline_env(monkeypatch):
    """W&B's default choice with no API key: offline. The secret sits in the launcher's environment."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv(SECRET_ENV, SECRET)


@pytest.mark.vllm
def test_a_real_sweep_reads_back_from_wandb_reports_and_a_job_resumes_into_the_same_wandb_run(
    tmp_path, offline_env, standing_servers
):
    """A local multirun of two 4-step jobs: W&B's offline files hold what the processes logged (steps, samples,
    evals, each job's sweep group and name, the tags, no secret), and the report reads the sweep (a line per swept
    value; the workspace it would save). Then job 0 resumes to step 8 into the same W&B run: the lr schedule and
    the counts so far go on from the checkpoint, and the resumed run's own settings apply (completions capped at
    2 tokens, shorter than every answer: a word and the end of turn)."""
    sweep = tmp_path / "sweep"
    common = [
        "ckpt.interval=2",
        "trainer.optim.warmup_steps=10",
        "monitor.samples_interval=1",
        "monitor.wandb.tags=[t1]",
        f"teacher.api_key_env={SECRET_ENV}",
    ]
    proc = subprocess.run(
        launch_cmd(
            "-m", "max_steps=4", "orchestrator.eval.interval=4", "trainer.optim.lr=1e-4,3e-4", *common,
            *standing_servers.overrides(*common), f"hydra.sweep.dir={sweep}",
        ),
        capture_output=True, text=True, cwd=ROOT, timeout=900, env=standing_servers.env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not run_processes(str(sweep))
    assert "wandb:" not in proc.stderr + proc.stdout  # W&B's console output stays in the trainer's log
    job = sweep / "0"
    assert (job / "checkpoints" / "step_4" / "STABLE").exists()
    runs = [offline_runs(sweep / j)[0] for j in ("0", "1")]
    run = runs[0]
    assert run.run.run_id == (job / RUN_ID_FILE).read_text().strip()
    assert set(run.run.tags) == {"mode:rl", "teacher:none", "lora:off", "t1"}
    assert run.config["max_steps"] == 4 and run.config["run_dir"] == str(job.resolve())
    assert run.config["teacher"]["api_key_env"] == SECRET_ENV
    assert all(r.steps_with("eval/reward") == [0, 4] for r in runs)  # step 4: the orchestrator's final eval
    assert run.steps_with("reward/mean") == [0, 1, 2, 3]  # orchestrator
    assert run.steps_with("loss") == [0, 1, 2, 3]  # trainer
    assert run.steps_with("samples/_type") == [0, 1, 2, 3]
    table = json.loads(next((run.path / "files" / "media" / "table").glob("samples_0_*.table.json")).read_text())
    assert len(table["data"]) == 16 and all("reverse" in row[0] for row in table["data"])
    assert sorted(p.name for p in (job / "plots").iterdir()) == ["loss.png", "reward.png", "throughput.png"]
    names = [r.run for r in runs]
    assert {n.run_group for n in names} == {f"{tmp_path.name}/sweep"}
    assert names[0].display_name != names[1].display_name and "trainer.optim.lr=" in names[0].display_name

    report = subprocess.run(
        [sys.executable, "-m", "prime_rl.report", str(sweep)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert report.returncode == 0, report.stderr
    rows = list(csv.DictReader((sweep / "report.csv").open()))
    assert [float(r["trainer.optim.lr"]) for r in rows] == [1e-4, 3e-4]
    assert all(r["status"] == "done" and float(r["eval/reward_final"]) > 0 for r in rows)
    for name in ("report_eval_reward_final_vs_trainer_optim_lr.png", "report_reward_curves.png"):
        assert (sweep / name).stat().st_size > 5000

    # the workspace it would save: the sweep's runs (their W&B group), a line per swept value, panels by family
    workspace = sweep_workspace(sweep, entity="someone")
    spec = workspace.runset_settings
    assert (workspace.entity, workspace.project) == ("someone", compose_config().monitor.wandb.project)
    assert "Group" in spec.filters and repr(names[0].run_group) in spec.filters  # the library keeps it as text
    assert [key.name for key in spec.groupby] == ["trainer.optim.lr"]
    panels = {p.title: p for section in workspace.sections for p in section.panels}
    assert [s.name for s in workspace.sections] == list(SECTIONS)
    assert (panels["eval/reward"].x, panels["loss"].x, panels["loss"].y) == ("eval/step", "Step", ["loss"])

    # and a single run's (here one job's): its own W&B run, by the id its run dir keeps
    single = subprocess.run(
        [sys.executable, "-m", "prime_rl.report", str(job)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert single.returncode == 0, single.stderr  # offline: no workspace is pushed, and that is no error
    workspace = run_workspace(job, entity="someone")
    assert "ID" in workspace.runset_settings.filters and repr(names[0].run_id) in workspace.runset_settings.filters
    assert [s.name for s in workspace.sections] == list(SECTIONS)

    resumed = launch(
        job, "max_steps=8", "ckpt.resume=true", "orchestrator.sampling.max_tokens=2", "orchestrator.eval.interval=0",
        "trainer.optim.lr=1e-4", *common, standing=standing_servers,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert plan_of(job)["resume_from"] == 4
    train = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if "loss" in r]
    assert [r["step"] for r in train] == list(range(8))
    # the lr schedule continues where it stopped (warmup step 5 of 10), as restored from the checkpoint
    assert train[4]["lr"] == pytest.approx(1e-4 * 5 / 11)
    # counts "so far" go on from the first run's: 128 rollouts scored per step (and the eval's at step 0)
    calls = [r["verifier/calls"] for r in train]
    assert [b - a for a, b in zip(calls, calls[1:])] == [128] * 7, calls
    truncated = [r["seq_len/truncated"] for r in train]
    assert max(truncated[:4]) < 0.5 and min(truncated[4:]) > 0.9, truncated
    [one, two] = offline_runs(job)
    assert one.run.run_id == two.run.run_id == (job / RUN_ID_FILE).read_text().strip()
    assert one.steps_with("loss") == [0, 1, 2, 3] and two.steps_with("loss") == [4, 5, 6, 7]
    assert not files_containing(sweep, SECRET)
    assert not files_containing(sweep, standing_servers.key)  # the standing server's key, which every run sent


@pytest.mark.integration
def test_an_unreachable_wandb_logs_offline_and_an_online_run_is_refused(tmp_path):
    """A key but no route to W&B (a SLURM node): auto falls back to offline with one warning before anything
    starts; an explicit online is a one-line error. WANDB_BASE_URL points at a port nobody listens on."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    env |= {"WANDB_API_KEY": "k" * 40, "WANDB_BASE_URL": f"http://127.0.0.1:{unused_port()}"}

    def dry_run(name: str, *overrides: str) -> subprocess.CompletedProcess:
        cmd = launch_cmd("launcher.dry_run=true", *overrides, f"hydra.run.dir={tmp_path / name}")
        return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=120)

    auto = dry_run("auto")
    assert auto.returncode == 0, auto.stderr[-2000:]
    warnings = [line for line in auto.stderr.splitlines() if line.startswith("warning: ")]
    assert any(env["WANDB_BASE_URL"] in line for line in warnings), auto.stderr  # where it found no W&B
    assert OmegaConf.load(tmp_path / "auto" / "configs" / "trainer.yaml").monitor.wandb.mode == "offline"
    online = dry_run("online", "monitor.wandb.mode=online")
    assert online.returncode == 2
    [line] = online.stderr.strip().splitlines()
    assert line.startswith("error: ") and "[monitor.wandb.mode]" in line and "; fix: " in line
    assert not (tmp_path / "online" / "configs").exists()

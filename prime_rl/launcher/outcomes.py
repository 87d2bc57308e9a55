"""What a run's launchers recorded of how it ended (RunDir.outcome, and a multi-node run's end marker), read back
as one line: for the job that failed, and for the sweep that waits for it."""

from pathlib import Path

from prime_rl.launcher.multinode import read_end_marker
from prime_rl.protocol.run_dir import RunDir


def recorded_failure(run_dir: Path, rank: int | None) -> str | None:
    """The failure a launcher recorded (RunDir.outcome; `rank`: a node's of a multi-node run), in one line."""
    outcome = RunDir(run_dir).read_outcome(rank)
    if outcome.get("status") != "failed":
        return None
    return f"role {outcome['role']} {outcome['reason']}; its log: {outcome['log']}"


def run_failure(run_dir: Path) -> str | None:
    """What a run recorded of its last failure: a multi-node run's by the node that ended its latest attempt (the
    newest end marker), a one-node run's by its launcher."""
    ends = sorted(RunDir(run_dir).end_marker("*").parent.glob("end.*"), key=lambda p: p.stat().st_mtime)
    end = read_end_marker(ends[-1]) if ends else None
    return recorded_failure(run_dir, end[0] if end else None)

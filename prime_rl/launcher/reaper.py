"""The launcher's last word: a small process that outlives a launcher killed with SIGKILL (the OOM killer,
`scancel --signal=KILL`) and stops what that launcher started.

Signal handlers and atexit cannot run after SIGKILL, and the children, each in its own session, would keep
running (a vLLM server re-parented to init). So before starting any child the supervisor starts this reaper in
a session of its own. It waits for the launcher's pid to end, then stops every process carrying the run's marker
(RUN_ENV, inherited by every descendant: a vLLM engine core, torchrun's workers, W&B's service) with TERM, the
stop grace, then KILL. It holds the run dir's lock until then, so a resumed launch cannot start while the old
run still writes there. A launcher that ends normally stops its children itself and then stops the reaper.

    python -m prime_rl.launcher.reaper <launcher pid> <run marker> <grace seconds>
"""

import os
import subprocess
import sys
from contextlib import suppress

from prime_rl.launcher.process_end import end_of, ended
from prime_rl.launcher.processes import RUN_ENV, stop_stragglers


def start_reaper(marker: str, grace_s: float, lock_fds: list[int]) -> subprocess.Popen:
    """The reaper of this launcher's run. It must not carry the marker itself, or it would stop itself."""
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    return subprocess.Popen(
        [sys.executable, "-m", "prime_rl.launcher.reaper", str(os.getpid()), marker, str(grace_s)],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the launcher's process group (Ctrl-C) must not reach it
        pass_fds=lock_fds,
    )


def main(argv: list[str]) -> None:
    launcher_pid, marker, grace_s = int(argv[0]), argv[1], float(argv[2])
    with suppress(ProcessLookupError):  # else it has ended already
        ended(end_of(launcher_pid))
    stop_stragglers(marker, grace_s, say=lambda line: print(f"reaper: {line}", file=sys.stderr, flush=True))


if __name__ == "__main__":
    main(sys.argv[1:])

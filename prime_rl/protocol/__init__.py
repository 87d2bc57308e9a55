"""What the processes of a run exchange, and nothing else (docs/architecture.md, "The run directory").

The launcher, orchestrator, trainer and monitor never import each other: they meet through files in the run
dir and through vLLM's HTTP API, and everything both sides of such a seam must agree on lives here:

- `run_dir.py`   where each file lives (rollouts, weights, checkpoints, metrics, logs, configs)
- `atomic.py`    how a file or directory appears whole or not at all, and the one completeness marker
- `batch.py`     the orchestrator -> trainer batch file
- `metrics.py`   metrics.jsonl: one writer per line, one reader
- `policy.py`    which policy version the rollouts of a step may come from (max_async_level)
- `servers.py`   served model names and the env var of the run's server key
- `polling.py`   waiting, up to a deadline, for what another process makes (a file, a server, weights)
- `handoff.py`   the batch and the weights announced on named pipes the moment they are whole (no polling)
- `device_turn.py` the colocated layout's turns on the one device, and the hand-offs between them
- `file_lock.py` a lock between processes on one file (the run dir's launcher, a tiny model's build, the device)
"""

"""One orchestrator step and one trainer step in one process, around the student's vLLM server: the loop a researcher
reads top to bottom while writing a training mode (docs/modes.md, "Developing a mode: one step in one process").

    python -m prime_rl.devstep <hydra overrides...> [--json PATH] [--run-dir DIR] [--show N]

The config, its checks, the student's build and its server are the launcher's own (launcher/); the step is the
orchestrator's `make_batch` (orchestrator/loop.py) and the trainer's `train_step` (trainer/step.py), the batch passed
in memory instead of a file. It prints what each stage made; `--json` writes the same facts for tests.
"""

"""One orchestrator step and one trainer step in one process, around the student's vLLM server: the loop a researcher
reads top to bottom while writing a training mode (docs/modes.md, "Developing a mode: one step in one process")."""

"""Rewards from a model: a judge (a chat model reading a rubric) or a reward model (a sequence classifier), asked
on the server of one of the run's teachers about each reply of the sources with task.verifier=judge."""

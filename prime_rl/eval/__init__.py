"""`python -m prime_rl.eval`: a model (a run's checkpoint, its starting model, a model dir or Hub id) evaluated on
one or more tasks by the training eval's own code, around a vLLM server started from the launcher's plan."""

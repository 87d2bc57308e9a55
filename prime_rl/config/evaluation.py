"""When the orchestrator evaluates, a fact of the config that three processes read: the orchestrator (it
evaluates), the launcher's teacher probe (the temperatures the endpoint must take) and the trainer's W&B run
(whether a final evaluation line will come)."""

from prime_rl.config.schema import Config


def due_for_eval(cfg: Config, step: int) -> bool:
    """Whether the orchestrator evaluates at `step` (and, for step 0, after the last step too). Evaluation
    needs the verifier, so verification off means no evaluation either."""
    interval = cfg.orchestrator.eval.interval
    return cfg.orchestrator.verification.enabled and bool(interval) and step % interval == 0

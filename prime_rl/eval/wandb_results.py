"""An evaluation's results on W&B where the config logs there (monitor.wandb, its mode settled as a run's): one W&B
run of job type `eval` with the request as its config, the results as a table (`eval/results`, a row per model and
task) and every metric as `<model>/<task>/<metric>` on one step, so runs of checkpoints compare in a W&B panel."""

from pathlib import Path

from prime_rl.config.schema import Config
from prime_rl.monitor.wandb_mode import wandb_mode

KEYS = ("model", "step", "task")  # what a row is; the rest are its metrics


def log_results(cfg: Config, out: Path, request: dict, rows: list[dict]) -> str | None:
    """The W&B run's dir (None: W&B is off)."""
    mode = wandb_mode(cfg.monitor.wandb.mode)
    if mode == "disabled":
        return None
    import wandb

    w = cfg.monitor.wandb
    run = wandb.init(
        project=w.project,
        entity=w.entity,
        name=w.name or f"eval {out.name}",
        group=w.group,
        job_type="eval",
        tags=["eval", *w.tags],
        config={"request": request},
        mode=mode,
        dir=out,
    )
    metrics = list(dict.fromkeys(k for row in rows for k in row if k not in KEYS))
    table = wandb.Table(columns=[*KEYS, *metrics], data=[[row.get(k) for k in (*KEYS, *metrics)] for row in rows])
    flat = {f"{row['model']}/{row['task']}/{k}": row[k] for row in rows for k in metrics if k in row}
    run.log({"eval/results": table, **flat}, step=0)
    run.finish()
    return run.dir

"""The run a devstep makes: the config `python launch.py` would compose and check, refused in one line where its
step needs more than the student's one server and one trainer process in this one, then built as the launcher's job
builds it (the Hub snapshots, the student, the checks that need its tokenizer)."""

import tempfile
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from prime_rl.config.layout import pushes_weights
from prime_rl.config.schema import Config, node_gpus, num_nodes
from prime_rl.config.store import compose_config
from prime_rl.config.teachers import REFERENCE, local_teachers, serves_reference, teacher_key
from prime_rl.config.timeouts import with_ready_timeout
from prime_rl.config.user_error import UserError, check
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.job import prepare_models, server_model_dirs, with_hub_snapshots
from prime_rl.launcher.plan import trainer_procs
from prime_rl.launcher.preflight import check_at_launch, check_with_student_tokenizer
from prime_rl.launcher.run_lock import claim_run_dir
from prime_rl.launcher.validation import hydra_error
from prime_rl.protocol.run_dir import RunDir

LAUNCH = "or run it with python launch.py"


def validated(overrides: list[str]) -> Config:
    """The composed config, through the launch's checks, then the devstep's own (both raise one-line errors)."""
    cfg = launch_config(overrides)
    check_one_process(cfg)
    return cfg


def launch_config(overrides: list[str], as_launched: bool = False) -> Config:
    """The config `python launch.py <overrides>` composes, through the launch's checks (one-line errors). With
    `as_launched`, its GPU counts are checked against what it asks, as its own launch checked them, not against this
    machine's: a run read back to serve part of it (an evaluation's student server) on other GPUs."""
    try:
        cfg = compose_config(overrides)
        check_at_launch(cfg, node_gpus(cfg.deployment) if as_launched else len(visible_gpus()))
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(hydra_error(e)) from e
    return cfg


def check_one_process(cfg: Config) -> None:
    """What a devstep cannot run: another server than the student's (a local teacher, a served reference), a trainer
    of several processes, or a weight push (the trainer's push waits for the orchestrator's request, and here both
    are this one thread). An external teacher needs no server of ours: it is asked as the orchestrator asks it."""
    check(
        not serves_reference(cfg),
        ["trainer.loss.kl_ref_from"],
        "a devstep starts only the student's server, and kl_ref_from=vllm serves the reference on another",
        f"use trainer.loss.kl_ref_from=trainer (the trainer's frozen copy), {LAUNCH}",
    )
    served = [teacher_key(name) for name in local_teachers(cfg) if name != REFERENCE]
    check(
        not served,
        [f"{key}.kind" for key in served],
        f"a devstep starts only the student's server, and {', '.join(served)} is a local_vllm teacher with its own",
        f"point it at a server that runs (teacher=external with its base_url), {LAUNCH}",
    )
    check(
        trainer_procs(cfg) == 1 and num_nodes(cfg.deployment) == 1,
        ["trainer.num_procs", "deployment.num_train_gpus", "deployment.num_infer_nodes", "deployment.num_train_nodes"],
        "a devstep trains in its own process, on one node: one trainer process",
        f"use trainer.num_procs=1 and at most one trainer GPU on one node, {LAUNCH}",
    )
    check(
        not pushes_weights(cfg),
        ["inference.weight_transfer"],
        "a weight push needs the trainer and the orchestrator in two processes, a devstep runs both in one",
        "use inference.weight_transfer=files (the step's policy is the same)",
    )


def claim(run_dir: Path | None) -> Path:
    """The run dir, locked for this process as the launcher locks its own: `run_dir`, which must hold no earlier
    run, or a new temporary one."""
    path = (run_dir or Path(tempfile.mkdtemp(prefix="prime-rl-"))).resolve()
    earlier = RunDir(path).earlier_run()
    if earlier:
        raise UserError(
            f"run dir in use [--run-dir]: {path} holds an earlier run ({', '.join(earlier)}); fix: give "
            "it a new --run-dir, or none (a temporary one)"
        )
    holder = claim_run_dir(path)
    if holder:
        raise UserError(
            f"run dir {path} is in use by another launcher (pid {holder}); fix: give it its own --run-dir, or none"
        )
    return path


def prepared(cfg: Config) -> Config:
    """As the launcher's job: the Hub models resolved, the student built (once, then cached), the checks that need its
    tokenizer, and the servers' ready timeout resolved."""
    cfg = with_hub_snapshots(cfg)
    prepare_models(cfg)
    cfg, _ = check_with_student_tokenizer(cfg)
    return with_ready_timeout(cfg, server_model_dirs(cfg))

"""The run a devstep makes: the config `python launch.py` would compose and check, refused in one line where its
step needs more than the student's one server and one trainer process in this one."""

from prime_rl.config.layout import pushes_weights
from prime_rl.config.modes import SelfTeacher, run_modes, self_teachers_of
from prime_rl.config.schema import Config, num_nodes
from prime_rl.config.teachers import REFERENCE, local_teachers, serves_reference, teacher_key
from prime_rl.config.user_error import check
from prime_rl.launcher.plan import trainer_procs
from prime_rl.launcher.validation import launch_config

LAUNCH = "or run it with python launch.py"


def validated(overrides: list[str]) -> Config:
    """The composed config, through the launch's checks, then the devstep's own (both raise one-line errors)."""
    cfg = launch_config(overrides)
    check_one_process(cfg)
    return cfg


def check_one_process(cfg: Config) -> None:
    """What a devstep cannot run: another server than the student's (a local teacher, a served reference or self-
    teacher), a trainer of several processes, or a weight push (the trainer's push waits for the orchestrator's
    request, and here both are this one thread). An external teacher needs no server of ours: it is asked as the
    orchestrator asks it."""
    check(
        not serves_reference(cfg),
        ["trainer.loss.kl_ref_from"],
        "a devstep starts only the student's server, and kl_ref_from=vllm serves the reference on another",
        f"use trainer.loss.kl_ref_from=trainer (the trainer's frozen copy), {LAUNCH}",
    )
    if REFERENCE in local_teachers(cfg) and not serves_reference(cfg):  # a server of the starting weights: θ0's
        apart = {SelfTeacher.initial, SelfTeacher.lagged}
        [key] = [f"modes.{m.name}.teacher" for m in run_modes(cfg) if apart & self_teachers_of(cfg, m)]
        check(
            False,
            [key, "lora"],
            "a devstep starts only the student's server, and a self-teacher not live without LoRA scores on another",
            f"use lora=on (the server's base model scores) or {key}=live, {LAUNCH}",
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

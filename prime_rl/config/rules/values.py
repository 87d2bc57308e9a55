"""The values of knobs: each one's range (bounds on its field in schema.py, config/ranges.py), then the knobs
that must fit one another."""

from prime_rl.config.evaluation import eval_task_config
from prime_rl.config.ranges import check_ranges
from prime_rl.config.schema import VLLM_MAX_NUM_SEQS, Config, TeacherKind
from prime_rl.config.teachers import local_teachers, teacher_config, teacher_key
from prime_rl.config.user_error import check


def ranges(cfg: Config, _: int) -> None:
    """Each knob's own range (on its field in schema.py), then the values no bound expresses."""
    check_ranges(cfg)
    t = cfg.trainer
    check(
        not t.lora.enabled or bool(t.lora.target_modules),
        ["trainer.lora.target_modules"],
        "is empty",
        "list modules, e.g. [q_proj,v_proj]",
    )


def batched_tokens(cfg: Config, _: int) -> None:
    """A scoring server's tokens per forward set by hand must not be below vLLM's own batch of sequences, or vLLM
    refuses to start it (after the launch: here it is one line before)."""
    settings = [("inference", cfg.inference.max_num_batched_tokens, cfg.inference.extra_args)]
    settings += [(teacher_key(n), teacher_config(cfg, n).max_num_batched_tokens, teacher_config(cfg, n).extra_args)
                 for n in local_teachers(cfg)]  # fmt: skip
    for key, tokens, extra_args in settings:
        check(
            not tokens or tokens >= VLLM_MAX_NUM_SEQS or "--max-num-seqs" in extra_args,
            [f"{key}.max_num_batched_tokens"],
            f"{tokens} tokens per forward is below vLLM's {VLLM_MAX_NUM_SEQS} sequences per batch on a GPU "
            "(--max-num-seqs), which vLLM refuses at its start",
            f"set {key}.max_num_batched_tokens to {VLLM_MAX_NUM_SEQS} or more (0: auto), or give --max-num-seqs in "
            f"{key}.extra_args",
        )


def eval_samples(cfg: Config, _: int) -> None:
    """k samples of a prompt at temperature 0 are one answer k times (and vLLM takes n > 1 only when sampling)."""
    tasks = cfg.orchestrator.eval.tasks
    for key, e in [("orchestrator.eval", cfg.orchestrator.eval)] + [
        (f"orchestrator.eval.tasks[{i}]", eval_task_config(cfg, t).orchestrator.eval) for i, t in enumerate(tasks)
    ]:
        check(
            e.samples_per_prompt == 1 or e.temperature > 0,
            [f"{key}.samples_per_prompt", f"{key}.temperature"],
            f"{e.samples_per_prompt} greedy samples (temperature 0) of a prompt are one answer {e.samples_per_prompt} "
            "times: pass@k would be pass@1",
            f"sample at a temperature above 0 ({key}.temperature=1), or take one sample ({key}.samples_per_prompt=1)",
        )


def pairs(cfg: Config, _: int) -> None:
    """Knobs that must fit one another."""
    o, loss, tiny = cfg.orchestrator, cfg.trainer.loss, cfg.model.tiny
    check(
        o.batch_size >= 1 and o.batch_size % o.rollouts_per_example == 0,
        ["orchestrator.batch_size", "orchestrator.rollouts_per_example"],
        f"batch_size {o.batch_size} is not a positive multiple of rollouts_per_example {o.rollouts_per_example}",
        "make batch_size a multiple of rollouts_per_example",
    )
    check(
        0 < o.sampling.max_tokens < cfg.inference.max_model_len,
        ["orchestrator.sampling.max_tokens", "inference.max_model_len"],
        "max_tokens must be positive and below max_model_len",
        "lower max_tokens or raise inference.max_model_len",
    )
    check(
        cfg.teacher.kind != TeacherKind.local_vllm or (cfg.teacher.max_tokens or 1) < cfg.inference.max_model_len,
        ["teacher.max_tokens", "inference.max_model_len"],
        "a local teacher's answers must fit its context: max_tokens must be below max_model_len",
        "lower teacher.max_tokens or raise inference.max_model_len",
    )
    check(
        o.length.overlong_buffer < o.sampling.max_tokens,
        ["orchestrator.length.overlong_buffer", "orchestrator.sampling.max_tokens"],
        f"the overlong buffer {o.length.overlong_buffer} must be below max_tokens={o.sampling.max_tokens}",
        "use e.g. a quarter of orchestrator.sampling.max_tokens, or 0 (off)",
    )
    band = o.difficulty
    check(
        band.min_pass_rate < band.max_pass_rate,
        ["orchestrator.difficulty.max_pass_rate", "orchestrator.difficulty.min_pass_rate"],
        f"the band [{band.min_pass_rate}, {band.max_pass_rate}] is empty",
        "keep min_pass_rate below max_pass_rate, e.g. 0.0 and 1.0 (skip what always fails or always passes)",
    )
    fix = loss.correction
    check(
        fix.mask_low <= 1 and (fix.mask_high >= 1 or fix.mask_high == 0),
        ["trainer.loss.correction.mask_low", "trainer.loss.correction.mask_high"],
        f"the weight's bounds [{fix.mask_low}, {fix.mask_high}] must contain 1 (an on-policy token)",
        "use e.g. mask_low=0.5 mask_high=5 (0 = no upper bound), or a preset: correction=icepop",
    )
    check(
        fix.truncate_at == 0 or fix.truncate_at >= 1,
        ["trainer.loss.correction.truncate_at"],
        f"truncating the weight at {fix.truncate_at} < 1 would scale down on-policy tokens too",
        "use e.g. truncate_at=2 (TIS's usual cap), or 0 (off)",
    )
    check(
        tiny.hidden_size % tiny.num_heads == 0 and tiny.num_heads % tiny.num_kv_heads == 0,
        ["model.tiny.hidden_size", "model.tiny.num_heads", "model.tiny.num_kv_heads"],
        "hidden_size must be a multiple of num_heads, and num_heads of num_kv_heads",
        "use e.g. hidden_size=128 num_heads=4 num_kv_heads=2",
    )

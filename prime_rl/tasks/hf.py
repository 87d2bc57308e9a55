"""Your own data through Hugging Face `datasets`: a data dir, a .json/.jsonl/.csv/.parquet file, or a Hub dataset id
(honouring HF_HUB_OFFLINE and the Hugging Face cache like models do)."""

from pathlib import Path

from prime_rl.config.schema import TaskConfig
from prime_rl.config.user_error import ConfigError
from prime_rl.models.hub import is_hub_id
from prime_rl.tasks.rewards import answer_scorer
from prime_rl.tasks.task import Example, Task

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def load_hf_task(cfg: TaskConfig) -> Task:
    """Train on `split`; evaluate on `eval_path`, or `eval_split`, or the last num_eval rows held out of `split`."""
    train = read_examples(cfg, cfg.path, cfg.split)
    if cfg.eval_path:
        evals = read_examples(cfg, cfg.eval_path, cfg.eval_split or cfg.split)
    elif cfg.eval_split:
        evals = read_examples(cfg, cfg.path, cfg.eval_split)
    else:
        cut = max(1, len(train) - cfg.num_eval)
        train, evals = train[:cut], train[cut:]
    if not train or not evals:
        raise ConfigError(
            ["task.path", "task.num_eval"],
            f"{cfg.path} has too few rows for a train and an eval split",
            "add rows, set task.eval_split or task.eval_path, or lower task.num_eval",
        )
    return Task(cfg.name, train, evals[: cfg.num_eval], answer_scorer(cfg))


def read_examples(cfg: TaskConfig, path: str, split: str) -> list[Example]:
    rows = load_rows(path, split, cfg.subset)
    missing = [k for k in (cfg.prompt_key, cfg.answer_key) if k not in rows.column_names]
    if missing:
        keys = [f"task.{'prompt' if k == cfg.prompt_key else 'answer'}_key" for k in missing]
        raise ConfigError(
            keys,
            f"{path} ({split}) has no column {', '.join(missing)}",
            f"name one of its columns: {', '.join(rows.column_names)}",
        )
    return [Example(str(p), str(a), cfg.system_prompt) for p, a in zip(rows[cfg.prompt_key], rows[cfg.answer_key])]


def hub_dataset_dir(dataset_id: str) -> str:
    """A Hub dataset's files in the Hugging Face cache, fetched unless cached (as models are; HF_HUB_OFFLINE=1 on
    SLURM nodes reads the cache a login node filled), then read as a local dir: one code path for all data."""
    from huggingface_hub import snapshot_download

    if not is_hub_id(dataset_id) or Path(dataset_id).suffix in FILE_BUILDERS:
        raise ConfigError(
            ["task.path"],
            f"{dataset_id} does not exist (and is no Hub dataset id)",
            "point it at a .jsonl/.json/.csv/.parquet file, a data dir or a Hub dataset id (org/name)",
        )
    return snapshot_download(dataset_id, repo_type="dataset")


def load_rows(path: str, split: str, subset: str | None = None):
    import datasets

    datasets.logging.disable_progress_bar()
    local = Path(path).expanduser()
    try:
        if local.is_file():
            builder = FILE_BUILDERS.get(local.suffix)
            if builder is None:
                raise ConfigError(["task.path"], f"{path}: unknown data file type", f"use {', '.join(FILE_BUILDERS)}")
            if split != "train":
                raise ConfigError(
                    ["task.split", "task.eval_split"],
                    f"{path} is one file, whose only split is train, not {split!r}",
                    "give eval data in task.eval_path, or leave task.eval_split unset to hold out num_eval rows",
                )
            return datasets.load_dataset(builder, data_files={"train": str(local)}, split="train")
        if (local / "dataset_info.json").exists() or (local / "dataset_dict.json").exists():
            saved = datasets.load_from_disk(str(local))  # a dataset written by save_to_disk
            return saved[split] if isinstance(saved, datasets.DatasetDict) else saved
        return datasets.load_dataset(str(local) if local.is_dir() else hub_dataset_dir(path), subset, split=split)
    except ConfigError:
        raise
    except Exception as e:  # datasets raises many types: missing files, unknown splits, no network, bad rows
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(
            ["task.path", "task.split"], f"cannot read {path} ({split}): {first}", "point task.path at readable data"
        ) from e

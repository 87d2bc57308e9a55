"""Which class loads a model dir's tokenizer without importing AutoTokenizer: its import (model configs,
generation, torch) costs ~4 s of CPU in every process that only needs a tokenizer (the orchestrator, the
launcher's checks). A built-in model records AutoTokenizer's choice when it is built; other dirs load through
AutoTokenizer itself."""

import json
from pathlib import Path

from prime_rl.models.recipe import RECIPE_FILE

RECORD_KEY = "tokenizer"  # {"class": AutoTokenizer's class name, "transformers": the version that chose it}


def tokenizer_record(model_dir: Path) -> dict[str, str]:
    """What to keep in a built model's record: the class AutoTokenizer loads its tokenizer with, and the
    transformers version that decided (another version may decide otherwise, and then decides again)."""
    import transformers

    return {
        "class": type(transformers.AutoTokenizer.from_pretrained(model_dir)).__name__,
        "transformers": transformers.__version__,
    }


def load_tokenizer(source: str | Path):
    """The tokenizer AutoTokenizer would load from a model dir (or Hub id): through the class the dir's record
    names, where this transformers made that record; through AutoTokenizer otherwise."""
    import transformers

    recorded = recorded_class(Path(source), transformers.__version__)
    loader = getattr(transformers, recorded, None) if recorded else None
    if loader is None:
        from transformers import AutoTokenizer as loader
    return loader.from_pretrained(source)


def recorded_class(model_dir: Path, version: str) -> str | None:
    record = model_dir / RECIPE_FILE
    if not record.is_file():
        return None
    choice = json.loads(record.read_text()).get(RECORD_KEY) or {}
    return choice.get("class") if choice.get("transformers") == version else None

"""How many tokens each prompt of a split takes under the student's chat template, kept in the cache dir keyed
by everything that decides it: the tokenizer's files, the template's arguments, the library versions that render
it, and the prompts. The launcher checks every prompt at every start; rendering a split of 20 k prompts, and
importing transformers to do it, costs seconds each time, while a relaunch of the same model and task (a resume,
a sweep point, a changed learning rate) has nothing new to measure.
"""

import contextlib
import hashlib
import json
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from prime_rl.config.schema import Config
from prime_rl.models.recipe import cache_root, student_dir
from prime_rl.protocol.atomic import write_text

WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")  # nothing a tokenizer reads


def prompt_lengths(cfg: Config, prompts: list, tokenizer) -> Counter[int]:
    """Token count -> how many of `prompts` have it. `tokenizer`: a function that loads the student's tokenizer,
    called only when these prompts were never measured with these files."""
    files = _tokenizer_files(student_dir(cfg))
    path = cache_root(cfg.model.cache_dir) / "prompt_lengths" / f"{_key(files, cfg, prompts)}.json"
    cached = _read(path) if files else None
    if cached is not None:
        return cached
    from prime_rl.models.chat import prompt_ids  # transformers: only when something is new

    loaded = tokenizer()
    lengths = Counter(len(prompt_ids(loaded, prompt)) for prompt in prompts)
    if files:  # a tokenizer from somewhere else than a dir (not one the launcher prepared) is not keyed
        with contextlib.suppress(OSError):  # a read-only cache: measured again next time, nothing lost
            write_text(path, json.dumps(lengths))  # whole or absent: the launchers of a sweep may measure at once
    return lengths


def _read(path: Path) -> Counter[int] | None:
    try:
        return Counter({int(n): count for n, count in json.loads(path.read_text()).items()})
    except (OSError, ValueError, AttributeError):  # absent, or not what this module writes: measure anew
        return None


def _key(files: dict[str, str], cfg: Config, prompts: list) -> str:
    digest = hashlib.sha256()
    for part in (files, cfg.model.chat_template_args, _versions(), prompts):
        digest.update(json.dumps(part, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def _tokenizer_files(model_dir: Path) -> dict[str, str]:
    """File name -> content hash of every file in the model dir but the weights (a Hub snapshot links them)."""
    if not model_dir.is_dir():
        return {}
    files = sorted(p for p in model_dir.iterdir() if p.is_file() and not p.name.endswith(WEIGHTS))
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _versions() -> dict[str, str]:
    return {lib: version(lib) for lib in ("transformers", "tokenizers", "jinja2")}

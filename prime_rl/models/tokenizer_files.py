"""The files a model dir's tokenizer is made from: two models whose files are the same, byte for byte, share
one tokenizer, which is known without loading either (and without importing transformers)."""

from pathlib import Path

# what transformers builds a tokenizer from, across the families (BPE, WordPiece, SentencePiece)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
)


def same_tokenizer_files(a: Path, b: Path) -> bool:
    """Both dirs hold the same tokenizer files (a family's models share them; the built-in teacher is the
    student's architecture trained longer). False where either has none: then only loading them tells."""
    first = _tokenizer_files(a)
    return bool(first) and first == _tokenizer_files(b)


def _tokenizer_files(model_dir: Path) -> dict[str, bytes]:
    return {name: (model_dir / name).read_bytes() for name in TOKENIZER_FILES if (model_dir / name).is_file()}

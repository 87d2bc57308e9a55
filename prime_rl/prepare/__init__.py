"""The launcher's prepare stage: make every model the run loads exist on disk before any process starts.

A user's model dir is used as it is; a Hub id was resolved to its snapshot by then (models/hub.py, downloaded
once by the launcher); the built-in tiny models are built (tokenizer, init, warm-start SFT) once per recipe and
cached. Processes never build or download: they load what `models.student_dir` / `teacher_dir` name.
"""

from pathlib import Path

from prime_rl.config.schema import Config
from prime_rl.prepare.tiny import prepare_model


def prepare_student(cfg: Config) -> Path:
    m = cfg.model
    return prepare_model(m.name, m.tiny, m.warm_start, cfg.task, m.cache_dir)


def prepare_teacher(cfg: Config) -> Path:
    """The local teacher: a model dir, or the tiny student architecture trained longer (teacher.warm_start)."""
    return prepare_model(cfg.teacher.model, cfg.model.tiny, cfg.teacher.warm_start, cfg.task, cfg.model.cache_dir)


__all__ = ["prepare_model", "prepare_student", "prepare_teacher"]

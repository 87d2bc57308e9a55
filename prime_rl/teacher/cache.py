"""Teacher answers kept on disk (`teacher.cache_dir`), so that a rerun, a resumed run or another point of a sweep
with the same prompts does not pay for them again.

An entry is one JSON file named by the hash of its question: the teacher (teacher_identity), the request (model,
messages, sampling, provider fields) and the sample index (the k-th answer a run takes for a prompt). It holds
the question too, which is checked on reading. Files are written whole under a temporary name and renamed, so
jobs sharing the dir on a network file system never read half an entry; two jobs writing the same entry write
the same kind of content and the last rename wins. No header or key is part of an entry."""

import hashlib
import json
from pathlib import Path

from prime_rl.config.schema import Config
from prime_rl.protocol.atomic import write_text
from prime_rl.teacher.client import teacher_identity


class TeacherCache:
    def __init__(self, root: Path, teacher: str):
        self.root = root
        self.teacher = teacher

    @classmethod
    def of(cls, cfg: Config) -> "TeacherCache | None":
        t = cfg.teacher
        return cls(Path(t.cache_dir).expanduser(), teacher_identity(cfg)) if t.cache_dir else None

    def path(self, kind: str, question: dict) -> Path:
        digest = hashlib.sha256(self.canonical(question).encode()).hexdigest()
        return self.root / kind / digest[:2] / f"{digest}.json"

    def canonical(self, question: dict) -> str:
        return json.dumps({"teacher": self.teacher, **question}, sort_keys=True, ensure_ascii=False)

    def get(self, kind: str, question: dict) -> dict | None:
        """The stored answer to `question`, or None (never stored, or unreadable: asked again and rewritten)."""
        try:
            entry = json.loads(self.path(kind, question).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("question") != json.loads(self.canonical(question)):
            return None
        return entry.get("answer")

    def put(self, kind: str, question: dict, answer: dict) -> int:
        """Store the answer; returns the entry's bytes."""
        entry = {"question": json.loads(self.canonical(question)), "answer": answer}
        text = json.dumps(entry, ensure_ascii=False) + "\n"
        write_text(self.path(kind, question), text)
        return len(text.encode())

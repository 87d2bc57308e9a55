"""What a teacher said about token sequences, kept in `teacher.cache_dir` beside its answers and read instead of
asking it again: across the steps and epochs of a run, a resumed run, the points of a sweep and every run that
names the same dir.

An entry is the teacher's logprobs of a completion's tokens after its prompt (and its top k, where the run distils
from them), under the teacher's identity (teacher/client.py: its model files, its server's dtype and arguments)
and the exact token ids: a teacher whose weights or settings changed, or another k, misses. Entries are written
whole and renamed into place (teacher/cache.py), so several writers at once (a SLURM array on a shared filesystem)
leave only whole entries. `teacher.cache_max_gib` bounds the store: past it the entries read least recently go."""

import os
from dataclasses import dataclass
from pathlib import Path

from prime_rl.config.schema import Config
from prime_rl.inference.client import TopLogprobs
from prime_rl.teacher.cache import TeacherCache

KIND = "scores"  # the store's subdir of the cache
SWEEP_SHARE = 0.05  # look at the store's size once this share of its bound was written since the last look
KEEP_SHARE = 0.9  # a sweep leaves the store at this share of its bound


@dataclass
class Counts:
    hits: int = 0  # sequences not asked for: in the store, or asked for once already in the same request
    misses: int = 0  # sequences the teacher was asked for
    written: int = 0  # bytes of the entries written


class ScoreStore:
    def __init__(self, cache: TeacherCache, max_bytes: int):
        self.cache = cache
        self.max_bytes = max_bytes  # 0: unbounded
        self.counts = Counts()
        self.unswept = 0  # bytes written since the last look at the store's size

    @classmethod
    def of(cls, cfg: Config) -> "ScoreStore | None":
        """The store of the teacher `cfg.teacher`, where it has a cache dir."""
        cache = TeacherCache.of(cfg)
        return cls(cache, int(cfg.teacher.cache_max_gib * 2**30)) if cache else None

    def question(self, model: str, pair: tuple[list[int], list[int]], k: int) -> dict:
        return {"model": model, "prompt_ids": pair[0], "completion_ids": pair[1], "top_k": k}

    def get(self, model: str, pair: tuple[list[int], list[int]], k: int) -> tuple | None:
        """(logprobs, top k or None) as the teacher gave them, or None; a hit is marked as read now."""
        question = self.question(model, pair, k)
        answer = self.cache.get(KIND, question)
        if answer is None:
            return None
        touch(self.cache.path(KIND, question))
        top = TopLogprobs(answer["top_ids"], answer["top_logprobs"]) if k else None
        return answer["logprobs"], top

    def put(self, model: str, pair: tuple[list[int], list[int]], k: int, score: tuple) -> None:
        logprobs, top = score
        answer = {"logprobs": logprobs} | ({"top_ids": top.ids, "top_logprobs": top.logprobs} if k else {})
        size = self.cache.put(KIND, self.question(model, pair, k), answer)  # (another job may evict it at once)
        self.counts.written += size
        self.unswept += size
        if self.max_bytes and self.unswept > SWEEP_SHARE * self.max_bytes:
            self.unswept = 0
            evict(self.cache.root / KIND, int(KEEP_SHARE * self.max_bytes))

    def take_metrics(self) -> dict[str, float]:
        """teacher/store_hits, …_misses (sequences) and …_written_mib since the last call."""
        c, self.counts = self.counts, Counts()
        return {
            "teacher/store_hits": c.hits,
            "teacher/store_misses": c.misses,
            "teacher/store_written_mib": c.written / 2**20,
        }


def touch(path: Path) -> None:
    """Mark an entry read now (its mtime: atime is often not kept); gone meanwhile (another job evicted it) is fine."""
    try:
        os.utime(path)
    except FileNotFoundError:
        pass


def evict(root: Path, keep_bytes: int) -> None:
    """Remove the entries read or written least recently until the store holds at most `keep_bytes`; another
    writer's sweep may remove the same files meanwhile."""
    entries = []
    for path in root.glob("*/*.json"):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        entries.append((stat.st_mtime_ns, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= keep_bytes:
            return
        path.unlink(missing_ok=True)
        total -= size

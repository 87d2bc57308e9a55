"""Built-in string tasks, generated deterministically from a seed; train and eval never share a prompt."""

import random
import string
from collections.abc import Callable

from prime_rl.config.schema import TaskConfig
from prime_rl.config.user_error import ConfigError
from prime_rl.tasks.rewards import answer_scorer, answer_verifier
from prime_rl.tasks.task import Example, Task

WORD_LENGTHS = {"min_len": 3, "max_len": 8}  # task.options of the built-in tasks: the words' length range
TINY_JUDGE_RUBRIC = "{answer} vs {completion}: same?"  # the built-in judge's (task=judge): short, for a tiny model


def word_lengths(cfg: TaskConfig) -> tuple[int, int]:
    """(min_len, max_len) from task.options; a range too narrow for the splits' distinct words is refused."""
    unknown = sorted(set(cfg.options) - set(WORD_LENGTHS))
    if unknown:
        raise ConfigError(
            ["task.options"], f"the built-in tasks take no option {', '.join(unknown)}", "use min_len, max_len"
        )
    lo, hi = ({**WORD_LENGTHS, **cfg.options}[k] for k in WORD_LENGTHS)
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ConfigError(["task.options"], f"word lengths {lo}..{hi} are not a range", "give 1 <= min_len <= max_len")
    if sum(26 ** min(n, 6) for n in range(lo, min(hi, lo + 6) + 1)) < 2 * (cfg.num_train + cfg.num_eval):
        raise ConfigError(
            ["task.options", "task.num_train"],
            f"too few distinct words of length {lo}..{hi} for {cfg.num_train + cfg.num_eval} examples",
            "raise max_len or lower task.num_train",
        )
    return lo, hi


def check_builtin(cfg: TaskConfig) -> None:
    """What building a built-in task could refuse (its options, its verifier), checked without generating it."""
    word_lengths(cfg)
    answer_verifier(cfg.verifier)


def _words(seed: int, count: int, min_len: int, max_len: int) -> list[str]:
    rng = random.Random(seed)
    seen, words = set(), []
    while len(words) < count:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(min_len, max_len)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def _split(cfg: TaskConfig, make: Callable[[str], Example], name: str) -> Task:
    words = _words(cfg.seed, cfg.num_train + cfg.num_eval, *word_lengths(cfg))
    examples = [make(w) for w in words]
    return Task(name, examples[: cfg.num_train], examples[cfg.num_train :], answer_scorer(cfg))


def reverse_task(cfg: TaskConfig) -> Task:
    """`reverse: abcde` -> `edcba`."""
    return _split(cfg, lambda w: Example(f"reverse: {w}", w[::-1], cfg.system_prompt), "reverse")


def sort_task(cfg: TaskConfig) -> Task:
    """`sort: dbca` -> `abcd` (an easy smoke task: it saturates quickly)."""
    return _split(cfg, lambda w: Example(f"sort: {w}", "".join(sorted(w)), cfg.system_prompt), "sort")


def judge_task(cfg: TaskConfig) -> Task:
    """Judging reverse's replies by TINY_JUDGE_RUBRIC: the right reply or a wrong one (a near miss, or a far one:
    near_miss), half each, answered `yes` or `no`: what the built-in judge learns."""
    rng = random.Random(cfg.seed)

    def make(word: str) -> Example:
        right = word[::-1]
        reply = right if rng.random() < 0.5 else near_miss(right, rng)
        prompt = TINY_JUDGE_RUBRIC.format(answer=right, completion=reply)
        return Example(prompt, "yes" if reply == right else "no", cfg.system_prompt)

    return _split(cfg, make, "judge")


def near_miss(text: str, rng: random.Random) -> str:
    """`text` with one slip (a letter changed, or copied over its neighbour, dropped or doubled, two swapped, the word
    unreversed), or a reply with nothing of it (a letter repeated, random letters): what a policy rewarded by this
    judge would otherwise learn to write; never `text` itself."""
    i = rng.randrange(len(text))
    slips = [
        text[:i] + rng.choice(string.ascii_lowercase.replace(text[i], "")) + text[i + 1 :],
        text[:i] + text[i + 1 :],
        text[:i] + text[i] + text[i:],
        text[::-1],
        rng.choice(string.ascii_lowercase) * len(text),
        "".join(rng.choice(string.ascii_lowercase) for _ in text),
    ]
    if len(text) > 1:
        j = min(i, len(text) - 2)
        slips.append(text[:j] + text[j + 1] + text[j] + text[j + 2 :])
        k = i - 1 if i else 1  # a neighbour's letter in i's place: the same letters, one of them twice
        slips.append(text[:i] + text[k] + text[i + 1 :])
    slips = [s for s in slips if s != text and s]
    return rng.choice(slips) if slips else text + rng.choice(string.ascii_lowercase)

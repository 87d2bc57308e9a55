"""An online difficulty filter (orchestrator.difficulty): a prompt whose last group passed too rarely or too often
is not drawn for the next `skip_steps` steps.

A group's pass rate is the share of its samples whose reward is at least `pass_reward`; outside the band
(`<= min_pass_rate`: too hard, `>= max_pass_rate`: too easy) its prompt waits. With the defaults a prompt that every
sample failed or every sample passed waits: in rl such a group has no advantage, so it spent generation on
nothing. The step's prompts are drawn from the train split without the waiting ones, still a function of (seed,
step) and of what the run judged before that step, which each step appends to `<run>/difficulty.jsonl`; a resumed
run rebuilds the filter from the rows before its first step (the launcher drops the later ones with the rest of
what it recomputes). With dynamic sampling the refills skip the waiting prompts too, and their groups are judged
like the step's own.
"""

from prime_rl.config.schema import DifficultyConfig
from prime_rl.protocol.batch import Sample
from prime_rl.protocol.metrics import append_row, read_rows
from prime_rl.tasks import Example, Task


class DifficultyFilter:
    def __init__(self, cfg: DifficultyConfig, task: Task, log):
        self.cfg, self.task, self.log = cfg, task, log
        self.index = {id(ex): i for i, ex in enumerate(task.train)}  # a prompt's place in the train split
        self.until: dict[int, int] = {}  # train index -> the first step that may draw it again
        self.judged: dict[str, list[int]] = {"too_hard": [], "too_easy": []}  # this step's, until it is written
        self.scored = 0  # groups judged this step

    def waiting(self, step: int, draws: int) -> list[Example]:
        """The prompts step `step` must not draw, so many at most that `draws` prompts remain (those released
        soonest are drawable first)."""
        waiting = sorted((i for i, until in self.until.items() if until > step), key=lambda i: (-self.until[i], i))
        return [self.task.train[i] for i in waiting[: max(len(self.task.train) - draws, 0)]]

    def judge(self, examples: list[Example], groups: list[list[Sample]]) -> None:
        """Each scored group's prompt, by its pass rate (a step's own groups and its refills')."""
        self.scored += len(groups)
        for ex, group in zip(examples, groups):
            rate = sum(s.reward >= self.cfg.pass_reward for s in group) / len(group)
            verdict = (
                "too_hard" if rate <= self.cfg.min_pass_rate else "too_easy" if rate >= self.cfg.max_pass_rate else None
            )
            if verdict and id(ex) in self.index:
                self.judged[verdict].append(self.index[id(ex)])

    def close_step(self, step: int, waited: int) -> dict[str, float]:
        """Step `step`'s verdicts take effect (and are logged for a resume); its metrics, `waited` the prompts it
        could not draw."""
        judged, scored = self.judged, max(self.scored, 1)
        self.judged, self.scored = {"too_hard": [], "too_easy": []}, 0
        self.until = {i: until for i, until in self.until.items() if until > step + 1}  # the released ones
        self.wait(step, judged["too_hard"] + judged["too_easy"])
        append_row(self.log, {"step": step, **judged})
        return {
            "difficulty/too_hard": len(judged["too_hard"]) / scored,
            "difficulty/too_easy": len(judged["too_easy"]) / scored,
            "difficulty/waiting": float(waited),
        }

    def wait(self, step: int, indices: list[int]) -> None:
        for i in indices:
            self.until[i] = step + 1 + self.cfg.skip_steps

    def resume(self, start: int) -> None:
        """The verdicts of the steps before `start`, from the run dir."""
        for row in read_rows(self.log):
            if row["step"] < start:
                self.wait(row["step"], row["too_hard"] + row["too_easy"])

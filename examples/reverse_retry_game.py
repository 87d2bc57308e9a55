"""A `verifiers` (v1) multi-turn environment for `task=verifiers`: reverse a word; a wrong answer is told so and
tried again, up to three attempts. The environment plays the user (`Env.run`), records the game's reward on the
trace, and the task's own reward scores the exchange when it closes.

    PYTHONPATH=examples python launch.py task=verifiers task.env=reverse_retry_game task.max_turns=3

The taskset id is this module's name; its exported `Env` subclass makes it multi-turn (verifiers' own rule: a
taskset whose package exports an Env is played by it)."""

import random
import string

import verifiers.v1 as vf

ATTEMPTS = 3


class RetryData(vf.TaskData):
    answer: str  # the reversed word


class RetryTask(vf.Task[RetryData]):
    @vf.reward(weight=0.2)
    async def answered_at_all(self, trace: vf.Trace) -> float:
        """A little credit for any reply that is one word of letters (the game's reward is the rest)."""
        return float(trace.last_reply.isalpha())


class RetryConfig(vf.TasksetConfig):
    num_tasks: int = 20000  # words generated
    min_len: int = 3  # shortest word
    max_len: int = 8  # longest word
    seed: int = 0  # seed of the words


class RetryTaskset(vf.Taskset[RetryTask, RetryConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for _ in range(self.config.num_tasks):
            word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(self.config.min_len, self.config.max_len)))
            yield RetryTask(RetryData(prompt=f"reverse: {word}", answer=word[::-1]), self.config.task)


class RetryEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class RetryEnv(vf.Env[RetryEnvConfig]):
    async def run(self, task, agents):
        """The player answers the prompt; each wrong answer gets "wrong, try again" until it is right or out of
        attempts. Reward 0.8 for a right answer on the first attempt, less on each later one."""
        reward = 0.0
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            for attempt in range(ATTEMPTS):
                if segment.last_reply == task.data.answer:
                    reward = 0.8 * (1 - attempt / ATTEMPTS)
                    break
                if attempt + 1 < ATTEMPTS:
                    segment = await interaction.turn("wrong, try again")
        interaction.trace.record_reward("solved", reward)


__all__ = ["RetryTaskset", "RetryEnv"]

"""GRPO advantages: each rollout's reward minus the mean of its prompt's group, optionally over the group's std."""

import torch


def grpo_advantages(rewards: list[float], group_sizes: list[int], std_normalize: bool) -> list[float]:
    """`rewards` in groups of `group_sizes` (a mix's sources may sample their prompts different numbers of times)."""
    advantages = []
    for r in torch.tensor(rewards, dtype=torch.float64).split(group_sizes):
        adv = r - r.mean()
        if std_normalize:
            adv = adv / (r.std(unbiased=False) + 1e-6)
        advantages.extend(adv.tolist())
    return advantages

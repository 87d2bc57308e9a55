"""GRPO advantages: each rollout's reward minus the mean of its prompt's group, optionally over the group's std."""

import torch


def grpo_advantages(
    rewards: list[float],
    group_sizes: list[int],
    std_normalize: bool,
    counted: list[bool] | None = None,
    tie_std: float = 0.0,
) -> list[float]:
    """`rewards` in groups of `group_sizes` (a mix's sources may sample their prompts different numbers of times).
    `counted`: the rewards that make their group's baseline (None: all). An episode its environment broke is not
    one: its 0 says nothing of the policy, and would make its group's other episodes look better; its advantage
    is 0. A group whose rewards' std is at most `tie_std` is tied: all 0, where dividing by that std would turn a
    judge's float noise into advantages of ±1."""
    counted_mask = torch.tensor([True] * len(rewards) if counted is None else counted)
    advantages = []
    for r, c in zip(torch.tensor(rewards, dtype=torch.float64).split(group_sizes), counted_mask.split(group_sizes)):
        adv = torch.zeros_like(r)
        spread = r[c].std(unbiased=False) if c.any() else 0.0
        if spread > tie_std:
            adv[c] = r[c] - r[c].mean()
            if std_normalize:
                adv[c] /= spread
        advantages.extend(adv.tolist())
    return advantages

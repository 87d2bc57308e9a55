"""GRPO advantages: each rollout's reward minus the mean of its prompt's group, optionally over the group's std."""

import torch


def grpo_advantages(
    rewards: list[float], group_sizes: list[int], std_normalize: bool, counted: list[bool] | None = None
) -> list[float]:
    """`rewards` in groups of `group_sizes` (a mix's sources may sample their prompts different numbers of times).
    `counted`: the rewards that make their group's baseline (None: all). An episode its environment broke is not
    one: its 0 says nothing of the policy, and would make its group's other episodes look better; its advantage
    is 0."""
    counted_mask = torch.tensor([True] * len(rewards) if counted is None else counted)
    advantages = []
    for r, c in zip(torch.tensor(rewards, dtype=torch.float64).split(group_sizes), counted_mask.split(group_sizes)):
        adv = torch.zeros_like(r)
        if c.any():
            adv[c] = r[c] - r[c].mean()
            if std_normalize:
                adv[c] /= r[c].std(unbiased=False) + 1e-6
        advantages.extend(adv.tolist())
    return advantages

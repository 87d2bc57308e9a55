"""GRPO advantages: each rollout's reward minus the mean of its prompt's group, optionally over the group's std."""

import torch


def grpo_advantages(rewards: list[float], group_size: int, std_normalize: bool) -> list[float]:
    r = torch.tensor(rewards, dtype=torch.float64).view(-1, group_size)
    adv = r - r.mean(dim=1, keepdim=True)
    if std_normalize:
        adv = adv / (r.std(dim=1, keepdim=True, unbiased=False) + 1e-6)
    return adv.flatten().tolist()

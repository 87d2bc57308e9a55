"""prime-rl launcher: RL, on-policy distillation and SFT-from-teacher behind one Hydra config."""

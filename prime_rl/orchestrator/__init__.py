"""Rollouts, rewards, advantages and teacher signals; writes one batch per step for the trainer."""

"""The trainer: per-token logprobs, the rl / sft losses, AdamW, weight export and checkpoints."""

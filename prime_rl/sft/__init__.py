"""Plain SFT on (prompt, answer) pairs: warm-starts the tiny models; also a CLI (`python -m prime_rl.sft`)."""

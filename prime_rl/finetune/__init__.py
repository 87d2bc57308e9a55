"""`python -m prime_rl.finetune`: supervised fine-tuning on a file of (prompt, answer) pairs with the trainer's own
step (trainer/supervised.py), which also warm-starts the built-in tiny models. Not training_mode=sft, which
learns from a teacher's rollouts in a launched run."""

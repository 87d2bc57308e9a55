"""Models: where each lives (recipe.py), the built-in tiny architecture and tokenizer, chat tokenization.
Building them is the launcher's prepare stage (prime_rl/prepare)."""

from prime_rl.models.recipe import model_dir, student_dir, teacher_dir

__all__ = ["model_dir", "student_dir", "teacher_dir"]

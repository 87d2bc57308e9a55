"""Local models: the built-in tiny Qwen2 student/teacher (built and warm-started once, cached) or a model dir."""

from prime_rl.models.build import ensure_model, ensure_student, ensure_teacher  # cheap: torch loads on a build
from prime_rl.models.recipe import model_dir, student_dir, teacher_dir

__all__ = ["ensure_model", "ensure_student", "ensure_teacher", "model_dir", "student_dir", "teacher_dir"]

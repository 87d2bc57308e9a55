"""Plans, starts and supervises the processes of a run (locally, or inside a SLURM allocation)."""

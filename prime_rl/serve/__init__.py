"""`python -m prime_rl.serve`: a student server that outlives runs (launcher/standing_server.py)."""

"""vLLM servers (started by the launcher from the plan) and the client that talks to them."""

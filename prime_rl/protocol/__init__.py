"""What the processes of a run exchange, and nothing else (docs/architecture.md, "The run directory"; its modules:
"Packages and who may import whom"). The launcher, orchestrator, trainer and monitor never import each other: they
meet through files in the run dir and through vLLM's HTTP API, and everything both sides of such a seam must agree on
lives here."""

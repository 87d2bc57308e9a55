"""Weights pushed from the trainer to the student server (inference.weight_transfer=nccl|gloo) instead of files:
vLLM's weight-transfer routes and engines, our transport for CPU, the gate that keeps a push between two of the
orchestrator's generations. docs/architecture.md, "Weight transfer"."""

"""What the teacher cost: the tokens its endpoint reports in each reply's `usage`, and their price."""

from dataclasses import dataclass, fields

from prime_rl.inference.client import RequestStats

TOTALS = ("requests", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd")  # also logged as run totals


@dataclass
class Usage:
    requests: int = 0  # HTTP requests to the teacher, retries included
    cache_hits: int = 0  # answers taken from teacher.cache_dir instead of the endpoint
    prompt_tokens: int = 0
    completion_tokens: int = 0  # reasoning tokens included (they are billed as output)
    reasoning_tokens: int = 0  # of the completion tokens, those a reasoning model spent thinking
    rate_limited: int = 0  # answers that asked us to wait (429 or Retry-After)
    rate_limit_wait_s: float = 0.0  # seconds spent waiting those out, summed over requests
    cost_usd: float = 0.0

    def add_reply(self, usage: dict, price_in: float, price_out: float) -> None:
        prompt, completion = count(usage, "prompt_tokens"), count(usage, "completion_tokens")
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.reasoning_tokens += count(usage.get("completion_tokens_details") or {}, "reasoning_tokens")
        self.cost_usd += (prompt * price_in + completion * price_out) / 1e6

    def add_requests(self, stats: RequestStats) -> None:
        self.requests += stats.requests
        self.rate_limited += stats.rate_limited
        self.rate_limit_wait_s += stats.rate_limit_wait_s

    def metrics(self, priced: bool) -> dict[str, float]:
        return {
            f"teacher/{f.name}": float(getattr(self, f.name)) for f in fields(self) if priced or f.name != "cost_usd"
        }


def count(usage: dict, key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) else 0


def run_totals(step: Usage, totals: dict[str, float], priced: bool) -> dict[str, float]:
    """The run's totals so far (`teacher/<name>_total`), `totals` being those of the steps before."""
    return {
        f"teacher/{name}_total": totals.get(f"teacher/{name}_total", 0.0) + float(getattr(step, name))
        for name in TOTALS
        if priced or name != "cost_usd"
    }

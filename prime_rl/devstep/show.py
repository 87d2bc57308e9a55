"""What each stage of a devstep made, printed stage by stage (rich): the samples by prompt, the orchestrator's metrics,
the trainer's token batch by part of the objective, and what train_step returned. Every text from the model or the
task is printed as text, never as rich markup."""

from itertools import groupby

from rich.console import Console
from rich.table import Table
from rich.text import Text

from prime_rl.protocol.metrics import metric_text


def stage(console: Console, title: str) -> None:
    console.rule(Text(title, style="bold"), align="left")


def show_samples(console: Console, samples: list[dict], limit: int) -> None:
    """Each prompt once, then its samples: reward, advantage, tokens, mean logprobs, completion."""
    shown = samples[:limit]
    for group, members in groupby(shown, key=lambda s: s["group"]):
        members = list(members)
        first = members[0]
        where = ", ".join(f"{k} {first[k]}" for k in ("mode", "source", "teacher") if first[k])
        console.print(Text.assemble((f"group {group}", "bold"), f" ({where}) prompt: ", repr(first["prompt"])))
        table = Table(box=None, padding=(0, 1), pad_edge=False)
        for name in ("reward", "advantage", "tokens", "log μ", "log scorer", "completion"):
            table.add_column(name, justify="left" if name == "completion" else "right", overflow="fold")
        for s in members:
            tokens = f"{s['trained_tokens']}/{s['completion_tokens']}" + (" cut" if s["truncated"] else "")
            table.add_row(
                cell(s["reward"]),
                cell(s["advantage"]),
                tokens,
                cell(s["sampler_logprob_mean"]),
                cell(s["scorer_logprob_mean"]),
                Text(repr(s["completion"])),
            )
        console.print(table)
    if len(samples) > len(shown):
        console.print(f"… {len(samples) - len(shown)} more samples (--show N prints more; --json PATH has every one)")


def show_metrics(console: Console, metrics: dict, sort: bool = True) -> None:
    """A name and its value a line."""
    table = Table(box=None, padding=(0, 1), pad_edge=False, show_header=False)
    table.add_column(style="cyan")
    table.add_column(justify="right")
    for name in sorted(metrics) if sort else metrics:
        table.add_row(name, cell(metrics[name]))
    console.print(table)


def show_token_batch(console: Console, parts: list[dict]) -> None:
    """Per part of the objective (a mode and its loss weights): its samples' micro-batches, positions and tokens, and
    the trained tokens that carry each stream."""
    for p in parts:
        weights = f"adv_tau {cell(p['adv_tau'])}, teacher_tau {cell(p['teacher_tau'])}, T {cell(p['temperature'])}"
        console.print(Text.assemble((f"part {p['mode']}", "bold"), f" ({weights})"))
        streams = {**p["streams"], **({"top k": p["top_k_tokens"]} if p["top_k_tokens"] else {})}
        show_metrics(
            console,
            {
                "samples": p["samples"],
                "micro-batches": f"{p['micro_batches']} of at most {p['micro_batch_size']} rows",
                "rows": p["rows"],
                "positions (rows x width)": p["positions"],
                "tokens (prompts and completions)": p["tokens"],
                "trained tokens": p["trained_tokens"],
                **{f"trained tokens with {name}": n for name, n in streams.items()},
            },
            sort=False,
        )


def cell(value: object) -> str:
    return metric_text(value, none="-")

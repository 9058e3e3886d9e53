"""What a long monitoring run costs in input tokens, for each way of keeping its history.

The workload of issue 15: a monitoring agent whose every turn is one tool call (about 300
characters of readings back) and one short answer, run for 300 and 1,000 turns through litellm's
real HTTP path against the scripted server in its prefix-caching mode (prompt tokens estimated
at 4 characters a token over the request's tools and messages, cached tokens by the longest
common prefix with the session's earlier requests, in 128-token blocks from 1,024, as OpenAI
reports them). Prices are gpt-4o-mini's list prices from litellm's bundled table (offline); the
two discounts price cached input at 50% (OpenAI) and 90% (Anthropic) off. Output tokens are
priced too (they are a few percent of the bill). The summary model's calls, when there is one,
are billed with the run (same model, its own cache session).

For each history handling the table gives the input tokens per model call at turns 10, 100, 300
(and 1,000) and its mean over the run, the cached share of all input, and the dollars per 1,000
turns at each discount. The runs go concurrently, each against a server of its own.

    python bench/token_cost.py            # 300 and 1,000 turns
    python bench/token_cost.py --quick    # 300 turns only, about a minute
    python bench/token_cost.py --json     # the rows as JSON lines
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autonomous import Agent, Tool, function_tool, run_autonomous
from autonomous._models import LiteLLMModel
from autonomous._options import make_options
from autonomous._state._history import window_start
from autonomous.testing._server import ScriptedServer, Step, call, reply
from usage import Pricing

MODEL = "openai/gpt-4o-mini"
API_KEY = "bench-key"
SUMMARY_USER = "history-summary"  # the summary model's own cache session on the server
INSTRUCTIONS = (
    "You watch the disks of the storage cluster. Each turn, call check_disks once, compare the "
    "readings with the earlier ones, and answer in one short sentence: what changed, and "
    "whether anyone must act. Call report_done only when told to stop."
)
#: The turns at which input per call is shown.
MARKS = (10, 100, 300, 1000)


def readings(n: int) -> str:
    """About 300 characters of disk readings, different every turn."""
    return "; ".join(
        f"disk{d} /data{d} {(37 * n + 11 * d) % 60 + 20}% used, {(13 * n + 7 * d) % 30 + 5}% inodes"
        for d in range(7)
    )


@attrs.frozen
class Handling:
    """One way of keeping the history: a label and the run options that make it."""

    label: str
    options: dict[str, Any]
    summaries: bool = False


HANDLINGS = (
    Handling("blocks, 50 cut to 13 (the default)", {}),
    Handling("blocks, 50 cut to 25 (half)", {"history_keep_turns": 25}),
    Handling("blocks, 50 cut to 13, with summaries", {}, summaries=True),
    Handling("sliding, 50", {"history": "sliding"}),
    Handling("sliding, 25", {"history": "sliding", "history_turns": 25}),
    Handling("all history (history_turns=0)", {"history_turns": 0}),
)


def summary_text(turn: int) -> str:
    """A summary of about 600 characters, as a cheap model writes one."""
    return (
        f"Through turn {turn - 1}: disks 0-6 between 20% and 80% used, inodes below 35%; "
        "no disk crossed 85%, nothing needed action; disk3 and disk5 rise slowly. "
    ) * 4


def script(server: ScriptedServer, turns: int, handling: Handling) -> None:
    """Queue every answer of the run: a tool call and a short answer per turn, and the summary
    model's answer before each turn that cuts the window (when the handling summarises)."""
    opts = make_options(handling.options)
    steps: list[Step] = []
    for t in range(1, turns + 1):
        w, k = opts.history_turns, opts.history_keep
        if handling.summaries and t > 1 and window_start(t, w, k) != window_start(t - 1, w, k):
            steps.append(reply(summary_text(t), output_tokens=150))
        steps.append(call("check_disks", {}, output_tokens=12))
        steps.append(reply(f"Turn {t}: all disks within limits, no action.", output_tokens=14))
    server.push(*steps)


def build_on(server: ScriptedServer) -> Callable[[list[Tool]], Agent]:
    """The monitoring agent on gpt-4o-mini, through litellm, at the scripted server."""
    counter = iter(range(1, 10**9))

    async def check_disks() -> str:
        """Read the usage of every disk of the cluster."""
        return readings(next(counter))

    def build(extra: list[Tool]) -> Agent:
        return Agent(
            MODEL,
            instructions=INSTRUCTIONS,
            tools=[function_tool(check_disks), *extra],
            api_base=server.api_base,
            api_key=API_KEY,
        )

    return build


async def measure(handling: Handling, turns: int, pricing: Pricing) -> dict[str, Any]:
    """Run ``turns`` turns of the workload under ``handling``; its row of the table."""
    with ScriptedServer(prefix_cache=True) as server:
        script(server, turns, handling)
        options = dict(handling.options)
        if handling.summaries:
            options["history_summary_model"] = LiteLLMModel(
                MODEL, api_base=server.api_base, api_key=API_KEY, user=SUMMARY_USER
            )
        started = time.perf_counter()
        result = await run_autonomous(
            build_on(server), "watch the disks", max_turns=turns, **options
        )
        seconds = time.perf_counter() - started
        bodies, billed = server.requests, server.prompt_usage
    assert result.turns == turns, result
    main = [u for b, u in zip(bodies, billed, strict=True) if b.get("user") != SUMMARY_USER]
    per_turn = {t: (main[2 * t - 2].prompt_tokens + main[2 * t - 1].prompt_tokens) / 2
                for t in MARKS if t <= turns}  # fmt: skip
    mean = sum(u.prompt_tokens for u in main) / len(main)
    prompt = sum(u.prompt_tokens for u in billed)
    cached = sum(u.cached_tokens for u in billed)
    output = result.output_tokens
    return {
        "handling": handling.label,
        "turns": turns,
        "input_per_call": per_turn,
        "mean_input_per_call": mean,
        "cached_share": cached / prompt,
        "usd_per_1000_turns": {
            f"{int(d * 100)}%": _usd(prompt, cached, output, pricing, d) / turns * 1000
            for d in (0.5, 0.9)
        },
        "model_calls": len(billed),
        "seconds": round(seconds, 1),
    }


def _usd(prompt: int, cached: int, output: int, p: Pricing, discount: float) -> float:
    uncached = prompt - cached
    per_token_in = p.input_per_mtok / 1e6
    return (
        uncached * per_token_in
        + cached * per_token_in * (1 - discount)
        + output * p.output_per_mtok / 1e6
    )


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    marks = [t for t in MARKS if any(t in r["input_per_call"] for r in rows)]
    head = " | ".join(f"turn {t:,}" for t in marks)
    lines = [
        f"| history handling | turns | input tokens per call at {head} | mean | cached | "
        "$ per 1,000 turns (50% / 90% discount) |",
        "|---|---|" + "---|" * len(marks) + "---|---|---|",
    ]
    for r in rows:
        cells = " | ".join(
            f"{r['input_per_call'][t]:,.0f}" if t in r["input_per_call"] else "" for t in marks
        )
        usd = r["usd_per_1000_turns"]
        lines.append(
            f"| {r['handling']} | {r['turns']:,} | {cells} | {r['mean_input_per_call']:,.0f} | "
            f"{r['cached_share']:.0%} | "
            f"{usd['50%']:.2f} / {usd['90%']:.2f} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 turns only")
    parser.add_argument("--json", action="store_true", help="the rows as JSON lines")
    args = parser.parse_args()
    pricing = Pricing.for_model(MODEL)
    lengths = (300,) if args.quick else (300, 1000)
    runs = [(h, n) for n in lengths for h in HANDLINGS]
    rows: dict[int, dict[str, Any]] = {}

    async def one(i: int, handling: Handling, turns: int) -> None:
        rows[i] = row = await measure(handling, turns, pricing)
        print(f"  {row['handling']}, {turns} turns: {row['seconds']} s", file=sys.stderr)

    started = time.perf_counter()
    # The runs go concurrently, each on a server of its own: a run mostly waits on HTTP.
    async with anyio.create_task_group() as tg:
        for i, (handling, turns) in enumerate(runs):
            tg.start_soon(one, i, handling, turns)
    ordered = [rows[i] for i in range(len(runs))]
    if args.json:
        for row in ordered:
            print(json.dumps(row))
        return
    print(f"gpt-4o-mini list prices: {pricing}; {time.perf_counter() - started:.0f} s in all")
    print(table(ordered))


if __name__ == "__main__":
    anyio.run(main)

"""How close to a cap a run gets: max_input_tokens and max_cost_usd on a monitoring workload.

Each turn is one tool call (about 300 characters of readings) and one short answer, through
litellm's real HTTP path to the scripted server, which bills prompts as OpenAI does (prompt
tokens from the request, cached tokens by prefix: ``ScriptedServer(prefix_cache=True)``). The
runtime refuses a call whose estimate would pass the cap, so the run stops with some headroom
left; this prints that headroom, and the size of one call for scale. Prices: gpt-4o-mini from
litellm's table; the cost cap reserves ``max_tokens=200`` of output for each call.

    .venv/bin/python bench/budget_cap.py
"""

from __future__ import annotations

import anyio

from autonomous import Agent, Tool, function_tool, run_autonomous
from autonomous.testing._server import ScriptedServer, call, reply
from usage import Pricing

READINGS = "disk / 42% used, inode 12%, io wait 0.3 ms, temperature 41 C; " * 5


async def check_disk(path: str) -> str:
    """Report the disk usage of path."""
    return f"{path}: {READINGS}"


async def one(cap_tokens: int, cap_usd: float) -> tuple[str, int, float, int, int]:
    """One run to the cap: reason, input tokens, cost, requests, the last call's input."""
    steps = [call("check_disk", {"path": "/"}, output_tokens=25), reply("ok", output_tokens=8)]
    with ScriptedServer(*(steps * 2000), prefix_cache=True) as srv:

        def build(extra: list[Tool]) -> Agent:
            return Agent(
                "openai/scripted-model",
                instructions="You watch disks. " * 80,
                tools=[function_tool(check_disk), *extra],
                api_base=srv.api_base,
                api_key="k",
                max_tokens=200,
            )

        result = await run_autonomous(
            build,
            "watch /",
            max_turns=0,
            max_input_tokens=cap_tokens,
            max_cost_usd=cap_usd,
            pricing=Pricing.for_model("gpt-4o-mini"),
            history_turns=50,
        )
        last = srv.prompt_usage[-1].prompt_tokens
        return result.reason.value, result.input_tokens, result.cost_usd, srv.request_count, last


async def main() -> None:
    """Print one line per cap."""
    print(
        "cap                 | stop reason         | spent       | headroom    | calls | last call"
    )
    for tokens in (20_000, 200_000, 1_000_000):
        reason, spent, _, calls, last = await one(tokens, 0.0)
        print(
            f"{tokens:>9,} tokens    | {reason:<19} | {spent:>11,} | {tokens - spent:>11,} | "
            f"{calls:>5} | {last:,} tokens"
        )
    for usd in (0.002, 0.02):
        reason, _, cost, calls, last = await one(0, usd)
        print(
            f"${usd:<8} cost       | {reason:<19} | ${cost:.6f}  | ${usd - cost:.6f}  | "
            f"{calls:>5} | {last:,} tokens"
        )


if __name__ == "__main__":
    anyio.run(main)

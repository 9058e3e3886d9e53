"""A disk-usage monitor that checks, sleeps, wakes, and reports, on the embedded SQLite log.

Offline by default (a scripted model stands in for the LLM); pass ``--model`` to use any litellm
model, e.g. ``--model openai/gpt-4o-mini`` with OPENAI_API_KEY set.

    python examples/monitor.py
    python examples/monitor.py --model openai/gpt-4o-mini --db runs.db
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from autonomous import (
    Agent,
    ModelResponse,
    RunResult,
    StopReason,
    function_tool,
    run_autonomous,
)
from autonomous.testing import ScriptedModel, call
from eventlog import EventKind, SessionRef, SqliteEventLog
from scheduler import SleepScheduler
from usage import Pricing

INSTRUCTIONS = """You watch the disk usage of a host. Each turn: call check_disk. If usage is
above 90%, call report_done with state "done" and a one-sentence alert. Otherwise schedule the
next check with schedule_next_turn (wake_in_sec between 1 and 2 for this demo). After three
calm checks, call report_done with a one-sentence summary."""


def check_disk(path: str = "/") -> dict[str, Any]:
    """Return the disk usage of ``path``: total and used bytes, and the percentage used.

    Args:
        path: A directory on the filesystem to measure.
    """
    usage = shutil.disk_usage(path)
    return {
        "path": path,
        "used_pct": round(100 * usage.used / usage.total, 1),
        "total_bytes": usage.total,
    }


def scripted_brain(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> ModelResponse:
    """Stands in for the LLM: reads the conversation and decides, like a model would."""
    last = messages[-1]
    checks = sum(1 for m in messages if m["role"] == "tool" and '"used_pct"' in str(m["content"]))
    if last["role"] == "user":
        return call("check_disk", {"path": "/"})
    if last["role"] == "tool" and '"used_pct"' in str(last["content"]):
        used = json.loads(last["content"])["used_pct"]
        if used > 90:
            return call("report_done", {"state": "done", "detail": f"Disk at {used}%: alert ops."})
        if checks >= 3:
            return call(
                "report_done", {"state": "done", "detail": f"Three calm checks, last {used}%."}
            )
        return call(
            "schedule_next_turn",
            {
                "wake_in_sec": 1,
                "next_prompt": f"Re-check disk usage on / (last reading {used}%).",
                "detail": f"check {checks} of 3",
            },
        )
    return ModelResponse(text=f"Checked {checks} time(s); waiting for the next turn.")


async def main(model_name: str | None, db: Path, session_id: str) -> RunResult:
    async with SqliteEventLog(db) as log:
        ref = SessionRef(log=log, app="monitor", user="ops", session_id=session_id)
        model: Any = model_name or ScriptedModel(default=scripted_brain)

        def build(extra_tools: list[Any]) -> Agent:
            return Agent(
                model,
                instructions=INSTRUCTIONS,
                session=ref,
                tools=[function_tool(check_disk, read_only=True), *extra_tools],
            )

        result = await run_autonomous(
            build,
            "Watch the disk usage of this host.",
            max_turns=10,
            max_cost_usd=0.05,
            max_wallclock=120,
            scheduler=SleepScheduler(),
            schedule_tool_max_defer=3600,
            # litellm's price table prices real models; the scripted one is priced like gpt-4o-mini.
            pricing=None if model_name else Pricing(input_per_mtok=0.15, output_per_mtok=0.6),
        )
        events = await log.read(ref.key)
    kinds = sorted({str(e.kind) for e in events})
    print(f"stop reason : {result.reason}")
    print(f"detail      : {result.done_detail or '-'}")
    print(f"turns       : {result.turns}")
    print(f"tokens      : {result.input_tokens} in / {result.output_tokens} out")
    print(f"cost        : ${result.cost_usd:.6f}")
    print(f"duration    : {result.duration:.1f} s")
    if result.error is not None:  # why the run gave up, e.g. the provider's missing credentials
        print(f"error       : {type(result.error).__name__}: {result.error}")
    where = f"session monitor/ops/{session_id}, {len(events)} events: {', '.join(kinds)}"
    print(f"event log   : {db} ({where})")
    checkpoints = [e for e in events if e.kind is EventKind.CHECKPOINT]
    print(
        f"checkpoints : {len(checkpoints)}, last stop_reason={checkpoints[-1].payload.stop_reason}"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", help="a litellm model string; default: the offline scripted model"
    )
    parser.add_argument(
        "--db", type=Path, default=Path("runs.db"), help="SQLite event log (default runs.db)"
    )
    parser.add_argument(
        "--session", default=f"disk-{random.randrange(16**6):06x}", help="session id"
    )
    parser.add_argument("--verbose", action="store_true", help="show the structured logs")
    args = parser.parse_args()
    if args.verbose:  # the library logs through the standard logging module
        logging.basicConfig(level=logging.INFO)
    outcome = anyio.run(main, args.model, args.db, args.session)
    sys.exit(0 if outcome.reason in (StopReason.COMPLETED, StopReason.DEFERRED) else 1)

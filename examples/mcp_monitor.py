"""The disk monitor of ``monitor.py`` with its disk check on an MCP server
(``mcp_disk_server.py``, started over stdio), under a PLAN-mode permission gate.

Needs the ``[mcp]`` extra: ``pip install 'bounded-autonomous[mcp]'``. Offline by default (a
scripted model stands in for the LLM); pass ``--model`` to use any litellm model.

    python examples/mcp_monitor.py
    python examples/mcp_monitor.py --model openai/gpt-4o-mini --db runs.db
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path
from typing import Any

import anyio

from autonomous import Agent, RunResult, StopReason, run_autonomous
from autonomous.mcp import MCPServer
from autonomous.testing import ScriptedModel
from eventlog import SessionRef, SqliteEventLog, ToolResult
from permissions import Gate, Mode
from scheduler import SleepScheduler
from usage import Pricing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from monitor import INSTRUCTIONS, scripted_brain  # the same agent, other tools

SERVER = MCPServer.stdio(
    sys.executable, [str(Path(__file__).resolve().parent / "mcp_disk_server.py")], name="disk"
)


async def main(model_name: str | None, db: Path, session_id: str) -> RunResult:
    async with SqliteEventLog(db) as log:
        ref = SessionRef(log=log, app="mcp-monitor", user="ops", session_id=session_id)
        model: Any = model_name or ScriptedModel(default=scripted_brain)

        def build(extra_tools: list[Any]) -> Agent:
            return Agent(
                model, instructions=INSTRUCTIONS, session=ref, tools=extra_tools,
                mcp_servers=[SERVER],
            )  # fmt: skip

        result = await run_autonomous(
            build,
            "Watch the disk usage of this host.",
            max_turns=10,
            max_cost_usd=0.05,
            max_wallclock=120,
            scheduler=SleepScheduler(),
            # PLAN runs only read-only tools: the server's readOnlyHint lets check_disk run.
            permissions_gate=Gate(Mode.PLAN),
            pricing=None if model_name else Pricing(input_per_mtok=0.15, output_per_mtok=0.6),
        )
        events = await log.read(ref.key)
    calls = [e.payload for e in events if isinstance(e.payload, ToolResult)]
    print(f"stop reason : {result.reason}")
    print(f"detail      : {result.done_detail or '-'}")
    print(f"turns       : {result.turns}")
    print(f"tool calls  : {', '.join(f'{c.name} {c.outcome}' for c in calls)}")
    if result.error is not None:
        print(f"error       : {type(result.error).__name__}: {result.error}")
    print(f"event log   : {db} (session mcp-monitor/ops/{session_id}, {len(events)} events)")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a litellm model string; default: the scripted model")
    parser.add_argument("--db", type=Path, default=Path("runs.db"), help="SQLite event log")
    parser.add_argument("--session", default=f"disk-{random.randrange(16**6):06x}")
    parser.add_argument("--verbose", action="store_true", help="show the structured logs")
    args = parser.parse_args()
    if args.verbose:
        logging.basicConfig(level=logging.INFO)
    outcome = anyio.run(main, args.model, args.db, args.session)
    sys.exit(0 if outcome.reason in (StopReason.COMPLETED, StopReason.DEFERRED) else 1)

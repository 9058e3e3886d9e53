"""A durable run for the crash tests: run or resume one session, then exit (or be killed).

    python crash_child.py STORE SESSION [--turns N] [--slow SECONDS] [--ttl SECONDS]

STORE is a SQLite file's path or a ``postgresql://`` URL (see ``stores.open_store``).

Each turn calls the ``work`` tool (which sleeps a little, so kills land inside tool calls too)
and then answers; after ``--turns`` completed turns the model calls the done tool. Exit codes:
0 finished, 3 the session was locked by another live process.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import structlog

from autonomous import Agent, ModelResponse, function_tool, resume_autonomous
from autonomous.testing import ScriptedModel, call, reply
from eventlog import SessionLocked, SessionRef
from tests.autonomous.stores import open_store


def brain(turns: int) -> Any:
    """A model that does one unit of work per turn and finishes after ``turns`` turns."""

    def answer(
        messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        last = messages[-1]
        done_turns = sum(
            1 for m in messages if m["role"] == "assistant" and m["content"] == "turn done"
        )
        if last["role"] == "user":
            return call("work", {"n": done_turns})
        if last["role"] == "tool" and str(last["content"]).startswith("worked"):
            if done_turns + 1 >= turns:
                return call("report_done", {"state": "done", "detail": "all turns done"})
            return reply("turn done")
        return reply("finished")

    return answer


async def main(store: str, session: str, turns: int, slow: float, ttl: float) -> int:
    async def work(n: int) -> str:
        """Do one unit of work."""
        await anyio.sleep(random.uniform(slow / 2, slow))
        return f"worked {n}"

    async with open_store(store) as log:
        ref = SessionRef(log, "crash", "test", session)
        model = ScriptedModel(default=brain(turns), record=False)

        def build(extra: list[Any], session_id: str) -> Agent:
            return Agent(model, tools=[function_tool(work), *extra], session=ref)

        print("started", flush=True)  # the parent times its kill from here
        try:
            result = await resume_autonomous(
                build, ref, max_turns=0, lease_ttl=ttl, control_poll=0.05
            )
        except SessionLocked:
            return 3
    print(result.reason.value, flush=True)
    return 0


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("session")
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--slow", type=float, default=0.02)
    parser.add_argument("--ttl", type=float, default=30.0)
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.store, args.session, args.turns, args.slow, args.ttl))

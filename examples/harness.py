"""A harness that drives a running agent: injects inbox messages, pauses it, resumes it.

The agent triages operator requests. It sleeps (``schedule_next_turn``) while its inbox is empty;
each injected message wakes it. Offline by default (a scripted model stands in for the LLM); pass
``--model`` to use any litellm model, e.g. ``--model openai/gpt-4o-mini`` with OPENAI_API_KEY set.

    python examples/harness.py
    python examples/harness.py --model openai/gpt-4o-mini --db runs.db
"""

from __future__ import annotations

import argparse
import logging
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import structlog

from autonomous import (
    Agent,
    ModelResponse,
    Paused,
    Resumed,
    TurnFinished,
    Woke,
    function_tool,
    start_autonomous,
)
from autonomous.testing import ScriptedModel, call, calls, reply
from eventlog import SessionRef, SqliteEventLog
from permissions import Caller
from scheduler import SleepScheduler

INSTRUCTIONS = """You triage operator requests. Each turn, for every line of the [Inbox] block call
note_task once with the request. If a message says "wrap up", call report_done with a
one-sentence summary instead. With an empty inbox, call schedule_next_turn with wake_in_sec 60
and next_prompt "Check the inbox." (a new message wakes you early)."""

TASKS: list[str] = []


def note_task(task: str) -> str:
    """Record an operator request in the task list and return its number.

    Args:
        task: The request, in one sentence.
    """
    TASKS.append(task)
    return f"task #{len(TASKS)} recorded"


def scripted_brain(messages: Sequence[dict[str, Any]], tools: Sequence[Any]) -> ModelResponse:
    """Stands in for the LLM: reads the turn's prompt and follows the instructions."""
    if messages[-1]["role"] != "user":
        return reply("Handled.")
    prompt = str(messages[-1]["content"])
    inbox = [line[2:] for line in prompt.splitlines() if line.startswith("- ")]
    if any("wrap up" in line for line in inbox):
        detail = f"Triaged {len(TASKS)} request(s)."
        return call("report_done", {"state": "done", "detail": detail})
    if inbox:
        return calls([("note_task", {"task": line}) for line in inbox])
    return call("schedule_next_turn", {"wake_in_sec": 60, "next_prompt": "Check the inbox."})


def show_progress(turn: int, event: Any) -> None:
    """Print the run's content-free progress events (the coarse ones) as they happen."""
    if isinstance(event, TurnFinished | Paused | Resumed | Woke):
        print(f"    progress: {type(event).__name__} (turn {turn})")


async def main(model_name: str | None, db: Path) -> None:
    """Start the agent, drive it through its inbox, print the result."""
    async with SqliteEventLog(db) as log:
        ref = SessionRef(log, "harness", "ops", f"triage-{secrets.token_hex(3)}")
        model: Any = model_name or ScriptedModel(default=scripted_brain)

        def build(extra_tools: list[Any]) -> Agent:
            """The agent, with the run's extra tools."""
            tools = [function_tool(note_task), *extra_tools]
            return Agent(model, instructions=INSTRUCTIONS, session=ref, tools=tools)

        goal = "Triage operator requests as they arrive."
        options: dict[str, Any] = {"max_turns": 20, "max_wallclock": 120}
        async with start_autonomous(
            build, goal, scheduler=SleepScheduler(), progress=show_progress, **options
        ) as handle:
            await handle.ready()
            print(f"started {ref.key}: {handle.status}")
            await anyio.sleep(0.5)  # the agent finds an empty inbox and goes to sleep
            print("inject: rotate the TLS certificate on edge-2")
            await handle.inject("rotate the TLS certificate on edge-2")
            await anyio.sleep(0.5)
            await handle.pause()
            print(f"paused: {handle.status}; a message sent now waits for resume")
            await handle.inject_as("page the on-call DBA about replica lag", Caller("alice"))
            await anyio.sleep(0.5)
            await handle.resume()
            print(f"resumed: {handle.status}")
            await anyio.sleep(0.5)
            print("inject: wrap up")
            await handle.inject("wrap up")
            result = await handle.wait()
    print(f"stop reason : {result.reason} ({result.done_detail})")
    print(f"turns       : {result.turns}, tasks: {TASKS}")
    print(f"event log   : {db}; see it with: autonomous --db {db} show {ref.key}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a litellm model string; default: the scripted model")
    parser.add_argument("--db", type=Path, default=Path("runs.db"), help="SQLite event log")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    anyio.run(main, args.model, args.db)

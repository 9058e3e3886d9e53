"""An orchestrator: start sessions that exit deferred, then resume them when due, like
``autonomous daemon`` does.

It runs the disk monitor of ``examples/specs/monitor.toml`` (its scheduler exits the process's
run at each ``schedule_next_turn``, leaving a deferred checkpoint with the wake time) for two
sessions, then polls the log's due sessions and resumes each one with ``resume_autonomous``:
budgets carry over, and the session lease keeps two resumers off one session. Offline by default;
``--model openai/gpt-4o-mini`` (with OPENAI_API_KEY set) uses that model instead.

    python examples/orchestrator.py
    python examples/orchestrator.py --model openai/gpt-4o-mini --db runs.db
"""

from __future__ import annotations

import argparse
import logging
import secrets
from pathlib import Path

import anyio
import attrs
import structlog

from autonomous import RunResult, resume_autonomous, run_autonomous
from autonomous.spec import AgentSpec, load_spec
from eventlog import SessionKey, SessionLocked, SessionRef, SqliteEventLog, utcnow

SPEC = Path(__file__).parent / "specs" / "monitor.toml"


def describe(key: SessionKey, result: RunResult) -> str:
    """One line about where a run left its session."""
    wake = f", next wake {result.next_wake_at:%H:%M:%S}" if result.next_wake_at else ""
    detail = f" ({result.done_detail})" if result.done_detail else ""
    return f"{key}: {result.reason}{detail} after {result.turns} turn(s){wake}"


async def resume_one(spec: AgentSpec, ref: SessionRef) -> None:
    """Resume one due session; another process holding it is not an error."""
    try:
        result = await resume_autonomous(spec.build_function(ref), ref, **spec.run_options())
    except SessionLocked as exc:
        print(f"  {ref.key}: skipped, held by {exc.holder}")
        return
    print(f"  resumed {describe(ref.key, result)}")


async def main(model: str | None, db: Path) -> None:
    """Start two sessions, then resume them whenever they are due until none is deferred."""
    spec = load_spec(SPEC)
    if model:
        spec = attrs.evolve(spec, model=model)
    async with SqliteEventLog(db) as log:
        mine = [spec.session_ref(log, f"disk-{secrets.token_hex(3)}") for _ in range(2)]
        for ref in mine:
            result = await run_autonomous(spec.build_function(ref), spec.goal, **spec.run_options())
            print(f"started {describe(ref.key, result)}")
        keys = {ref.key for ref in mine}
        while True:
            summaries = {s.key: s for s in await log.sessions() if s.key in keys}
            waiting = [s for s in summaries.values() if s.stop_reason == "deferred"]
            if not waiting:
                break
            due = [s for s in await log.due_sessions(utcnow()) if s.key in keys]
            if due:
                print(f"poll: {len(waiting)} deferred, {len(due)} due")
            async with anyio.create_task_group() as tg:
                for summary in due:
                    ref = SessionRef(log, summary.key.app, summary.key.user, summary.key.session_id)
                    tg.start_soon(resume_one, spec, ref)
            if not due:
                await anyio.sleep(0.5)
    print(f"all done; see them with: autonomous --db {db} ls")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a litellm model string; default: the spec's scripted one")
    parser.add_argument("--db", type=Path, default=Path("runs.db"), help="SQLite event log")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    anyio.run(main, args.model, args.db)

"""One fleet daemon's cost per resume: its CPU time and its statements to PostgreSQL.

``bench/fleet.py`` measures a fleet on the wall clock, which on a shared machine says as much
about the neighbours as about the daemons. This runs one daemon in this process (the
``autonomous daemon`` class, on a ``PostgresEventLog``) over S sessions all due at once (seeded
as the fleet bench seeds them: copies of one real run of the ``waking`` brain), until each has
run its wake turn, and reports what it spent per resume:

    cpu         this process's CPU time (user + system) from the daemon's start to the last
                resume's end, divided by the resumes: the daemon's own cost, whatever else
                the machine runs
    statements  statements the log sent to the server (through its pool), per resume

    python bench/fleet_resume_cpu.py                       # 500 sessions, 64 slots
    python bench/fleet_resume_cpu.py --sessions 1000 --slots 16
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the fleet tests' harness is shared with this bench
sys.path.insert(0, str(ROOT / "bench"))

import anyio  # noqa: E402
from fleet import fresh_schema  # noqa: E402

from tests.fleet.daemons import ENV  # noqa: E402
from tests.fleet.harness import seed, session_keys, template_events, write_agent  # noqa: E402


def count_statements(counts: Counter[str]) -> None:
    """Count every statement a PostgresEventLog sends through its pool in ``counts``."""
    from eventlog._postgres import _conn as _postgres_conn

    send = _postgres_conn.Database.all

    async def counted(self: Any, action: Any, query: str, params: dict[str, Any]) -> Any:
        counts["statements"] += 1
        return await send(self, action, query, params)

    _postgres_conn.Database.all = counted  # type: ignore[method-assign]


async def serve_until_done(db: str, sessions: int, slots: int) -> tuple[int, float]:
    """Run one daemon until ``sessions`` resumes have ended; (resumes, CPU seconds)."""
    from autonomous._cli._daemon import Daemon
    from eventlog import PostgresEventLog

    ended = anyio.Event()
    reports: Counter[str] = Counter()

    def report(event: str, **fields: Any) -> None:
        reports[event] += 1
        if reports["finished"] + reports["failed"] >= sessions:
            ended.set()

    async with PostgresEventLog(db) as log:
        daemon = Daemon(
            log, poll=1.0, once=False, crashed=True, report=report, max_concurrent=slots
        )
        began = time.process_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.serve)
            await ended.wait()
            spent = time.process_time() - began
            tg.cancel_scope.cancel()
    if reports["failed"]:
        raise SystemExit(f"{reports['failed']} resumes failed")
    return reports["finished"], spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--slots", type=int, default=64, help="the daemon's --max-concurrent")
    args = parser.parse_args()
    print("$ python " + shlex.join(sys.argv), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-resume-cpu-") as tmp, fresh_schema() as db:
        work = Path(tmp)
        agent = work / "agent"
        agent.mkdir()
        template = template_events(agent, write_agent(agent, "waking"), work)
        due = datetime.now(UTC) - timedelta(seconds=1)
        seed(db, template, dict.fromkeys(session_keys(args.sessions), due), concurrency=4)
        os.chdir(agent)  # where the spec's brains module is found, as for a daemon
        sys.path.insert(0, str(agent))
        os.environ.update({k: v for k, v in ENV.items() if k not in os.environ})
        counts: Counter[str] = Counter()
        count_statements(counts)
        resumes, spent = anyio.run(serve_until_done, db, args.sessions, args.slots)
    print(
        f"{resumes} resumes, {args.slots} slots: cpu {spent / resumes * 1000:.2f} ms a resume, "
        f"{counts['statements'] / resumes:.1f} statements a resume"
    )


if __name__ == "__main__":
    main()

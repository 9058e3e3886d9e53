"""Instructions this process runs per model call and per append on PostgreSQL, by callgrind.

Timings on a shared machine move with its load; instruction counts do not. This script runs
itself again under valgrind's callgrind and counts, between ``callgrind_control`` zeroings and
dumps, the instructions of: one model call of ``bench/pg_append.py``'s bare psycopg loop (the
floor), of ``run_autonomous`` with no store at all (the runtime's own work), and of
``run_autonomous`` on a ``PostgresEventLog`` (T=200, one run each after a warm-up); then one
floor INSERT and one fenced append of a model call's batch (an answer and its tool result).
The server's work is not counted (another process): see ``bench/pg_append.py``'s CPU columns.

    python bench/pg_instructions.py      # a few minutes; needs valgrind
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import structlog
from overhead import library_run, script
from pg_append import (
    DEFAULT_DSN,
    FLOOR_PAYLOAD,
    FLOOR_TABLE,
    bare_pg_loop,
    fresh_schema,
    level_dsn,
    loop_batch,
    open_floor,
)

from eventlog import LeaseHolder, PostgresEventLog, SessionKey

T = 200
APPENDS = 200


def counted(name: str) -> None:
    """Tell callgrind to dump (as ``name``) what it counted since the last zeroing."""
    subprocess.run(["callgrind_control", f"--dump={name}", str(os.getpid())], check=True)


def zeroed() -> None:
    """Tell callgrind to start counting afresh."""
    subprocess.run(["callgrind_control", "-z", str(os.getpid())], check=True)


async def count(name: str, fn: Callable[[], Awaitable[None]]) -> None:
    """One warm-up run of ``fn``, then one counted."""
    await fn()
    zeroed()
    await fn()
    counted(name)


async def child(dsn: str) -> None:
    """The counted parts (run under callgrind)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    async with fresh_schema(dsn) as schema:
        level = level_dsn(dsn, schema, "off")
        floor = await open_floor(level)
        async with PostgresEventLog(level) as log:
            steps = script(T)
            runs = iter(range(1_000_000))
            await count("call floor", lambda: bare_pg_loop(steps, floor))
            await count("call runtime, no store", lambda: library_run(steps, None, "none"))
            await count("call postgres", lambda: library_run(steps, log, f"s{next(runs)}"))
            key = SessionKey("bench", "append", "x")
            lease = await log.acquire_lease(key, LeaseHolder.this_process(), 3600)
            batches = [loop_batch(key, n, checkpoint=False) for n in range(APPENDS)]
            insert = f"INSERT INTO {FLOOR_TABLE} (payload) VALUES (%s)"

            async def inserts() -> None:
                for _ in range(APPENDS):
                    await floor.execute(insert, (FLOOR_PAYLOAD,))

            async def appends() -> None:
                for batch in batches:
                    await log.append(batch, lease=lease)

            await count("append floor, 1 row", inserts)
            await count("append postgres, 2 events", appends)
        await floor.close()


def parent(dsn: str) -> None:
    """Run :func:`child` under callgrind and print what it counted, per operation."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}/cg.%p",
                sys.executable,
                __file__,
                "--child",
                "--dsn",
                dsn,
            ],
            check=True,
            capture_output=True,
        )
        counts = {}
        for dump in Path(out).glob("cg.*.*"):
            text = dump.read_text(errors="replace")
            name = re.search(r"^desc: Trigger: dump (.+)$", text, re.MULTILINE)
            total = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
            if name and total:
                counts[name.group(1)] = int(total.group(1))
    print(f"$ {os.path.relpath(sys.executable)} {' '.join(sys.argv)}")
    print(f"thousands of instructions of this process (callgrind), T={T}, {APPENDS} appends")
    for name in sorted(counts, key=lambda n: (not n.startswith("call"), n)):
        per = T if name.startswith("call") else APPENDS
        print(f"  {name:<28}{counts[name] / per / 1000:>8.0f} k per {name.split()[0]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("AUTONOMOUS_BENCH_PG", DEFAULT_DSN),
        help=f"the server (default {DEFAULT_DSN}, or AUTONOMOUS_BENCH_PG)",
    )
    args = parser.parse_args()
    if args.child:
        anyio.run(child, args.dsn)
    else:
        parent(args.dsn)

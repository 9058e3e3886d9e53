"""The cost of one EventLog.append on the agent loop's hot path, against an aiosqlite floor.

Each model call of the loop appends one small batch: an AssistantMessage with one tool call and
its ToolResult (2 events), and at the end of a turn a Checkpoint as well (3 events). This times
those batches on MemoryEventLog and SqliteEventLog, next to the floor every SQLite store pays:
aiosqlite inserting one row and committing (two trips to its thread), in WAL mode at the same
``synchronous`` level, on SQLite's default page size (the store's own file settings are part of
what is measured). Contenders run in alternating rounds of many appends each, so that a noisy
machine slows them all alike; each figure is the median over rounds of the mean microseconds per
append in a round (WAL checkpoints included, spread over the round's commits).

    python bench/eventlog_append.py                 # synchronous=NORMAL, about 20 seconds
    python bench/eventlog_append.py --quick         # fewer rounds
    python bench/eventlog_append.py --sync FULL     # the other durability level
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import aiosqlite
import anyio

from eventlog import (
    AssistantMessage,
    Checkpoint,
    Event,
    EventLog,
    MemoryEventLog,
    SessionKey,
    SqliteEventLog,
    ToolCallRecord,
    ToolResult,
)

KEY = SessionKey("bench", "bench-user", "session-0001")
FLOOR_PAYLOAD = json.dumps({"text": "", "turn": 3, "tool_calls": [["c1", "tick", '{"n": 3}']]})


def loop_batch(n: int, *, checkpoint: bool) -> list[Event]:
    """The events one model call appends: an answer with one tool call, its result, maybe a
    checkpoint."""
    call_id = f"call-{n}"
    batch = [
        Event.create(
            KEY,
            AssistantMessage(
                text="",
                turn=n,
                tool_calls=(ToolCallRecord(call_id, "tick", f'{{"n": {n}}}'),),
                model="scripted",
                input_tokens=120 + n,
                output_tokens=12,
                cost_usd=0.00042,
            ),
            author="agent",
        ),
        Event.create(KEY, ToolResult(call_id, "tick", str(n + 1), n), author="agent"),
    ]
    if checkpoint:
        batch.append(
            Event.create(KEY, Checkpoint(n, 120 * n, 12 * n, 0.00042 * n, "go on"), author="agent")
        )
    return batch


def batches(*, checkpoint: bool, distinct: int = 1000) -> Iterator[list[Event]]:
    """Batches built ahead, so that timing leaves building them out; ``distinct`` of them, in a
    cycle (neither store minds an event appended twice)."""
    return itertools.cycle([loop_batch(n, checkpoint=checkpoint) for n in range(distinct)])


async def open_floor(path: Path, synchronous: str) -> aiosqlite.Connection:
    """An aiosqlite connection set up like the store's: WAL, the same synchronous level."""
    db = await aiosqlite.connect(path)
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute(f"PRAGMA synchronous = {synchronous}")
    await db.execute("CREATE TABLE IF NOT EXISTS steps (id INTEGER PRIMARY KEY, payload TEXT)")
    await db.commit()
    return db


Contender = Callable[[int], Awaitable[None]]


def floor_contender(db: aiosqlite.Connection) -> Contender:
    """``n`` floor appends: INSERT one row, commit."""

    async def run(n: int) -> None:
        for _ in range(n):
            await db.execute("INSERT INTO steps (payload) VALUES (?)", (FLOOR_PAYLOAD,))
            await db.commit()

    return run


def log_contender(log: EventLog, *, checkpoint: bool) -> Contender:
    """``n`` appends of loop batches to ``log``."""
    pool = batches(checkpoint=checkpoint)

    async def run(n: int) -> None:
        append = log.append
        for _ in range(n):
            await append(next(pool))

    return run


async def main(rounds: int, per_round: int, synchronous: str) -> None:
    """Time every contender and print the table."""
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        floor = await open_floor(tmp / "floor.db", synchronous)
        memory = MemoryEventLog()
        sqlite2 = SqliteEventLog(tmp / "two.db", synchronous=synchronous)
        sqlite3 = SqliteEventLog(tmp / "three.db", synchronous=synchronous)
        contenders = {
            "aiosqlite floor (1 row)": floor_contender(floor),
            "sqlite, 2 events": log_contender(sqlite2, checkpoint=False),
            "sqlite, 3 events": log_contender(sqlite3, checkpoint=True),
            "memory, 2 events": log_contender(memory, checkpoint=False),
            "memory, 3 events": log_contender(memory, checkpoint=True),
        }
        runs = {name: per_round * (10 if name.startswith("memory") else 1) for name in contenders}
        results = await race(contenders, runs, rounds)
        await floor.close()
        await sqlite2.aclose()
        await sqlite3.aclose()
    report(results, rounds, synchronous)


async def race(
    contenders: dict[str, Contender], runs: dict[str, int], rounds: int
) -> dict[str, float]:
    """Median microseconds per append of each contender over alternating rounds.

    A round runs ``runs[name]`` appends of each contender (memory appends are fast: more of
    them); every other round runs the contenders in reverse order.
    """
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for name, run in contenders.items():
        await run(max(1, runs[name] // 4))
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            names = list(contenders)
            if r % 2:
                names.reverse()
            for name in names:
                start = time.perf_counter()
                await contenders[name](runs[name])
                samples[name].append((time.perf_counter() - start) / runs[name] * 1e6)
            gc.collect()
    finally:
        gc.enable()
    return {name: statistics.median(times) for name, times in samples.items()}


def report(results: dict[str, float], rounds: int, synchronous: str) -> None:
    """Print microseconds per append and the ratio to the floor."""
    floor = results["aiosqlite floor (1 row)"]
    print(
        f"python {sys.version.split()[0]}; synchronous={synchronous}; median of {rounds} rounds;"
        " microseconds per append"
    )
    print(f"{'':<26}{'us/append':>10}{'us/event':>10}{'x floor':>9}")
    for name, micros in results.items():
        events = 1 if "floor" in name else int(name.split(", ")[1][0])
        print(f"{name:<26}{micros:>10.1f}{micros / events:>10.2f}{micros / floor:>9.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--sync", default="NORMAL", choices=["NORMAL", "FULL"])
    args = parser.parse_args()
    quick_rounds, full_rounds = 9, 31
    anyio.run(main, quick_rounds if args.quick else full_rounds, 200, args.sync)

"""Per-model-call overhead of the loop against bare floors, and memory per concurrent run.

Runs T model calls of a one-tool loop (T-1 calls of an async ``tick(n) -> n + 1``, then a final
answer) on ScriptedModel, in-process, no HTTP, logging off. Prints microseconds per model call
(median of several runs) at T=50 and T=500 with the in-memory log and with the SQLite log,
next to two floors timed in the same process: a bare asyncio loop doing the same scripted calls,
and that loop appending one row per step with aiosqlite. The four loops take turns, round after
round, so that the machine's drift falls on all of them alike; the "x" columns are the median of
the ratios taken round by round. Also: commits and bytes written per model call with SQLite, and
memory per run with 1,000 concurrent runs of 5 calls each.

    python bench/overhead.py            # the full run (about a minute and a half)
    python bench/overhead.py --quick    # fewer repetitions
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
import structlog

from autonomous import Agent, StopReason, function_tool, run_autonomous, start_autonomous
from autonomous.testing import ScriptedModel, call, reply
from eventlog import EventLog, SessionRef, SqliteEventLog


async def tick(n: int) -> int:
    """Return n plus one."""
    return n + 1


TICK = function_tool(tick)

#: Model calls over which bytes written and commits are counted, at every T.
BYTES_CALLS = 5000


def script(calls: int) -> list[Any]:
    """calls-1 tick calls, then a final answer."""
    return [call("tick", {"n": i}, id=f"c{i}") for i in range(calls - 1)] + [reply("final")]


def _wchar() -> int:
    """Bytes this process passed to write() so far (Linux /proc/self/io)."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# ---- floors -----------------------------------------------------------------------------


async def bare_loop(steps: list[Any], db: aiosqlite.Connection | None = None) -> None:
    """The floor: the same scripted calls and tool calls, no runtime around them."""
    model = ScriptedModel(steps, record=False, check=False)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    specs = [TICK.spec()]
    while True:
        response = await model.complete(messages, specs)
        messages.append({"role": "assistant", "content": response.text})
        for c in response.tool_calls:
            result = await tick(**json.loads(c.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": str(result)})
        if db is not None:
            await db.execute("INSERT INTO steps(payload) VALUES (?)", (json.dumps(messages[-1]),))
            await db.commit()
        if not response.tool_calls:
            return


async def open_floor_db(path: Path, synchronous: str) -> aiosqlite.Connection:
    """An aiosqlite connection set up like the event log (WAL, given synchronous level)."""
    db = await aiosqlite.connect(path)
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute(f"PRAGMA synchronous={synchronous}")
    await db.execute("CREATE TABLE IF NOT EXISTS steps(id INTEGER PRIMARY KEY, payload TEXT)")
    await db.commit()
    return db


# ---- the library ------------------------------------------------------------------------


async def library_run(steps: list[Any], log: EventLog | None, session_id: str) -> None:
    """One run_autonomous of the scripted loop (one turn of len(steps) model calls)."""
    model = ScriptedModel(steps, record=False, check=False)
    session = SessionRef(log, "bench", "bench", session_id) if log is not None else None

    def build(extra: list[Any]) -> Agent:
        return Agent(model, tools=[TICK, *extra], session=session)

    result = await run_autonomous(build, "go", max_turns=1, max_model_calls_per_turn=len(steps))
    assert (result.reason, result.turns) == (StopReason.MAX_TURNS_EXCEEDED, 1), result


async def timed(
    fns: dict[str, Callable[[], Awaitable[None]]], repeats: int
) -> dict[str, list[float]]:
    """Seconds of ``repeats`` runs of each fn (after one warm-up each), in round order.

    The fns take turns, round after round (the order rotating), so that the machine's drift
    and noise fall on all of them alike; the runs of one round are close in time, so their
    ratios can be taken round by round (see :func:`paired`).
    """
    for fn in fns.values():
        await fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for round_no in range(repeats):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            start = time.perf_counter()
            await fns[name]()
            times[name].append(time.perf_counter() - start)
    return times


def paired(times: dict[str, list[float]], name: str, floor: str) -> float:
    """The median over rounds of ``name``'s time over ``floor``'s in the same round.

    A burst of noise (another process, the CPU clocking down) that lasts a few rounds moves
    both times of those rounds, so it moves this less than the ratio of two medians.
    """
    return statistics.median(a / b for a, b in zip(times[name], times[floor], strict=True))


class CountingLog:
    """Wraps a log to count its write transactions (each is one commit): every append batch,
    and every lease write (taking, renewing, releasing, or releasing with the last batch)."""

    def __init__(self, inner: SqliteEventLog) -> None:
        self.inner = inner
        self.durable = True
        self.commits = 0

    async def append(self, events: Any, **fence: Any) -> Any:
        self.commits += 1
        return await self.inner.append(events, **fence)

    async def append_and_release(self, events: Any, lease: Any) -> Any:
        self.commits += 1
        return await self.inner.append_and_release(events, lease)

    async def acquire_lease(self, *args: Any) -> Any:
        self.commits += 1
        return await self.inner.acquire_lease(*args)

    async def renew_lease(self, *args: Any) -> Any:
        self.commits += 1
        return await self.inner.renew_lease(*args)

    async def release_lease(self, *args: Any) -> Any:
        self.commits += 1
        return await self.inner.release_lease(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def bench_t(calls: int, repeats: int, tmp: Path, synchronous: str) -> dict[str, float]:
    """Every figure at one T."""
    steps = script(calls)
    db = await open_floor_db(tmp / f"floor-{calls}-{synchronous}.db", synchronous)
    log = SqliteEventLog(tmp / f"lib-{calls}-{synchronous}.db", synchronous=synchronous)
    counter = CountingLog(log)
    n = 0

    async def one() -> None:
        nonlocal n
        n += 1
        await library_run(steps, counter, f"s{n}")  # type: ignore[arg-type]

    times = await timed(
        {
            "bare": lambda: bare_loop(steps),
            "memory": lambda: library_run(steps, None, "m"),
            "bare_sqlite": lambda: bare_loop(steps, db),
            "sqlite": one,
        },
        repeats,
    )
    await db.close()
    out = {name: statistics.median(t) / calls * 1e6 for name, t in times.items()}
    out["x_bare"] = paired(times, "memory", "bare")
    out["x_floor"] = paired(times, "sqlite", "bare_sqlite")
    # Over the same number of calls at every T (5,000), so that the WAL's periodic copy back
    # into the file (every 4 MiB of WAL) lands in the figure as often as it happens.
    runs = max(1, BYTES_CALLS // calls)
    counter.commits = 0
    before = _wchar()
    for _ in range(runs):
        await one()
    out["bytes_per_call"] = (_wchar() - before) / (runs * calls)
    out["commits_per_call"] = counter.commits / (runs * calls)
    await log.aclose()
    return out


async def bench_memory(runs: int, with_handle: bool) -> float:
    """KiB per run while ``runs`` runs of 5 model calls are all in flight at once.

    ``with_handle``: each run is started with start_autonomous (a handle and a task group per
    run); else each is a run_autonomous call in one shared task group.
    """
    release = anyio.Event()
    all_in = anyio.Event()
    arrived = 0

    async def gate(messages: Any, tools: Any) -> Any:
        nonlocal arrived
        arrived += 1
        if arrived == runs:
            all_in.set()
        await release.wait()
        return call("tick", {"n": 1})

    # Responses are immutable, so the runs share them; each run has its own ScriptedModel.
    steps = [
        call("tick", {"n": 0}),
        call("tick", {"n": 1}),
        gate,
        call("tick", {"n": 2}),
        reply("f"),
    ]

    def build_for(model: ScriptedModel) -> Callable[[list[Any]], Agent]:
        return lambda extra: Agent(model, tools=[TICK, *extra])

    async def one() -> None:
        build = build_for(ScriptedModel(steps, record=False, check=False))
        if with_handle:
            async with start_autonomous(build, "go", max_turns=1) as h:
                await h.wait()
        else:
            await run_autonomous(build, "go", max_turns=1)

    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    async with anyio.create_task_group() as tg:
        for _ in range(runs):
            tg.start_soon(one)
        await all_in.wait()
        gc.collect()
        during = tracemalloc.get_traced_memory()[0]
        release.set()
    tracemalloc.stop()
    return (during - base) / runs / 1024


async def main(quick: bool) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    repeats = 5 if quick else 45
    print(f"python {sys.version.split()[0]}; median of {repeats} runs; microseconds per model call")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        results = {}
        for synchronous in ("NORMAL", "FULL"):
            for calls in (50, 500):
                r = await bench_t(calls, repeats, tmp, synchronous)
                results[(synchronous, calls)] = r
        header = f"{'T':>4} {'sync':>6} {'bare':>7} {'memory':>8} {'x bare':>7} {'bare+sql':>9} {'sqlite':>8} {'x floor':>8} {'commits':>8} {'bytes':>7}"
        print(header)
        for (synchronous, calls), r in results.items():
            print(
                f"{calls:>4} {synchronous:>6} {r['bare']:>7.1f} {r['memory']:>8.1f} {r['x_bare']:>7.1f}"
                f" {r['bare_sqlite']:>9.1f} {r['sqlite']:>8.1f} {r['x_floor']:>8.2f}"
                f" {r['commits_per_call']:>8.2f} {r['bytes_per_call']:>7.0f}"
            )
        n50, n500 = results[("NORMAL", 50)], results[("NORMAL", 500)]
        print(f"late/early (T=500 vs T=50), memory log: {n500['memory'] / n50['memory']:.2f}")
        print(f"late/early (T=500 vs T=50), sqlite log: {n500['sqlite'] / n50['sqlite']:.2f}")
        print(
            f"bytes per call T=500 / T=50 (sqlite): {n500['bytes_per_call'] / n50['bytes_per_call']:.2f}"
        )
    for with_handle, how in ((False, "run_autonomous"), (True, "start_autonomous + handle")):
        kib = await bench_memory(1000, with_handle)
        print(f"memory per concurrent run, 1,000 runs of 5 calls, {how}: {kib:.1f} KiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    anyio.run(main, parser.parse_args().quick)

"""Resume latency of a durable session, and inject-to-wake latency of a sleeping run.

Resume: sessions of about 100, 10,000 and 100,000 events on SqliteEventLog, built by appending
realistic events directly (per turn: the prompt, an answer calling a tool, its result, the final
answer, a checkpoint; an inject queued and delivered every 50 turns; batches of ~2,000 events per
append), ending on a ``deferred`` checkpoint whose ``next_wake_at`` is past and one inject still
undelivered. Each repetition opens the file afresh (a new SqliteEventLog: a new connection, as a
new process would) and times, in milliseconds:

    open     opening the file (connection, pragmas, schema check)
    lease    log.acquire_lease on the open log
    ckpt     log.latest_checkpoint
    restore  autonomous._durable._restore.restore(..., window=Window(20, 5)), as a run with history_turns=20: checkpoint, tail, window, inbox
    total    resume_autonomous(build, ref, history_turns=20, ...) from the call (file not yet
             open) to the start of the first model call, end to end
    all-hist the same total with history_turns=0 (the whole history is loaded)

The scripted model's first step records ``time.perf_counter()`` and raises a BaseException the
loop does not catch, so the run stops before writing anything: every repetition sees the same log.

Wake: a run (start_autonomous, SleepScheduler) whose model schedules its next turn an hour ahead;
once it sleeps, ``await handle.inject("wake")`` and time to the start of the next model call, on
MemoryEventLog and SqliteEventLog. Then the path from another connection: ``send_inject`` on a
second SqliteEventLog of the same file, picked up by the run's log watcher (control_poll 0.05 s
and the default 0.5 s). Median and p90 in milliseconds.

    python bench/resume.py            # the full run (under a minute)
    python bench/resume.py --quick    # fewer repetitions, sizes up to 10,000 events
    python bench/resume.py --profile  # also cProfiles of resumes of the largest session
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import logging
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import structlog
from resume_history import APP, CHECK, HISTORY_TURNS, USER, Built, build_session

from autonomous import Agent, resume_autonomous, send_inject, start_autonomous
from autonomous._durable._restore import restore
from autonomous._options import RunOptions
from autonomous._state._history import Window
from autonomous.testing import ScriptedModel, call, reply
from eventlog import (
    EventKind,
    EventLog,
    LeaseHolder,
    MemoryEventLog,
    SessionKey,
    SessionRef,
    SqliteEventLog,
)
from scheduler import SleepScheduler

# ---- resume latency ---------------------------------------------------------------------


class _FirstCall(BaseException):
    """Raised by the scripted model at its first call: ends the run without any write."""


def _first_call_step(box: dict[str, Any]) -> Callable[..., Any]:
    def step(messages: Sequence[dict[str, Any]], tools: Any) -> Any:
        box["t"] = time.perf_counter()
        box["messages"] = len(messages)
        box["inbox"] = "[Inbox]" in str(messages[-1].get("content"))
        raise _FirstCall

    return step


async def resume_once(path: Path, built: Built, history_turns: int) -> tuple[float, dict[str, Any]]:
    """Seconds from calling resume_autonomous on a not yet opened log to the first model call."""
    box: dict[str, Any] = {}
    log = SqliteEventLog(path)
    model = ScriptedModel([_first_call_step(box)], record=False, check=False)

    def build(extra: list[Any], session_id: str) -> Agent:
        return Agent(
            model,
            instructions="You watch disks.",
            tools=[CHECK, *extra],
            session=SessionRef(log, APP, USER, session_id),
        )

    ref = SessionRef(log, *_parts(built.key))
    start = time.perf_counter()
    try:
        await resume_autonomous(
            build,
            ref,
            history_turns=history_turns,
            max_turns=built.turns + 1,
            scheduler=SleepScheduler(),
        )
    except BaseException as exc:  # _FirstCall, perhaps inside an exception group
        if not _is_first_call(exc):
            raise
    finally:
        await log.aclose()
    if "t" not in box:
        raise AssertionError("the resumed run never called the model")
    return box["t"] - start, box


def _is_first_call(exc: BaseException) -> bool:
    if isinstance(exc, _FirstCall):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_first_call(e) for e in exc.exceptions)
    return False


async def parts_once(path: Path, built: Built) -> dict[str, float]:
    """The resume's parts, each timed directly on a freshly opened log (seconds)."""
    out: dict[str, float] = {}
    log = SqliteEventLog(path)
    try:
        t0 = time.perf_counter()
        await log.open()
        t1 = time.perf_counter()
        lease = await log.acquire_lease(built.key, LeaseHolder.this_process(), 30.0)
        t2 = time.perf_counter()
        cp = await log.latest_checkpoint(built.key)
        t3 = time.perf_counter()
        window = Window(HISTORY_TURNS, RunOptions(history_turns=HISTORY_TURNS).history_keep)
        restored = await restore(log, built.key, window=window)
        t4 = time.perf_counter()
        await log.release_lease(lease)
    finally:
        await log.aclose()
    assert cp is not None and restored.checkpoint_seq == cp.seq
    assert len(restored.pending) == 1, restored.pending
    out.update(open=t1 - t0, lease=t2 - t1, ckpt=t3 - t2, restore=t4 - t3)
    return out


async def last_seq(path: Path, key: SessionKey) -> int:
    """The seq of the session's newest event."""
    async with SqliteEventLog(path) as log:
        events = await log.read_last(key, list(EventKind), 1)
    return events[-1].seq if events else 0


async def bench_resume(
    path: Path, built: Built, repeats: int, whole_repeats: int
) -> dict[str, Any]:
    """Median of each figure over ``repeats`` (``whole_repeats`` for the whole-history total)."""
    before = await last_seq(path, built.key)
    await parts_once(path, built)  # warm-up: imports, cattrs structure functions, page cache
    await resume_once(path, built, HISTORY_TURNS)
    parts: list[dict[str, float]] = []
    totals: list[float] = []
    box: dict[str, Any] = {}
    for _ in range(repeats):
        gc.collect()
        parts.append(await parts_once(path, built))
        gc.collect()
        seconds, box = await resume_once(path, built, HISTORY_TURNS)
        totals.append(seconds)
    whole: list[float] = []
    whole_box: dict[str, Any] = {}
    for _ in range(whole_repeats):
        gc.collect()
        seconds, whole_box = await resume_once(path, built, 0)
        whole.append(seconds)
    after = await last_seq(path, built.key)
    assert after == before, f"the resumes wrote to the log ({before} -> {after})"
    assert box["inbox"], "the undelivered inject did not reach the first prompt"
    out: dict[str, Any] = {
        name: statistics.median(p[name] for p in parts) * 1e3 for name in parts[0]
    }
    out["total"] = statistics.median(totals) * 1e3
    out["total_p90"] = _p90(totals) * 1e3
    out["whole"] = statistics.median(whole) * 1e3
    out["messages"] = box["messages"]
    out["whole_messages"] = whole_box["messages"]
    return out


async def profile_resume(path: Path, built: Built, history_turns: int, runs: int) -> str:
    """A cProfile of ``runs`` resumes (this thread only: not aiosqlite's), by own time."""
    profiler = cProfile.Profile()
    await resume_once(path, built, history_turns)  # warm
    for _ in range(runs):
        profiler.enable()
        await resume_once(path, built, history_turns)
        profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(18)
    return stream.getvalue()


# ---- inject-to-wake latency -------------------------------------------------------------


class _NotingSleepScheduler(SleepScheduler):
    """SleepScheduler that also says when a sleep begins (the bench waits for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeping: anyio.Event = anyio.Event()

    async def wait(self, event: Any, waker: Any) -> Any:
        self.sleeping.set()
        try:
            return await super().wait(event, waker)
        finally:
            self.sleeping = anyio.Event()


async def bench_wake(
    log: EventLog, repeats: int, *, remote: bool = False, control_poll: float = 0.5
) -> list[float]:
    """Seconds from just before an inject to the start of the next model call, ``repeats`` times.

    ``remote``: inject through a second SqliteEventLog on the same file with send_inject (the
    run's log watcher picks it up), not through the handle.
    """
    stamps: list[float] = []
    called = [anyio.Event()]
    scheduler = _NotingSleepScheduler()

    def model_step(messages: Sequence[dict[str, Any]], tools: Any) -> Any:
        if messages[-1]["role"] == "user":  # a turn begins: the model call we time
            stamps.append(time.perf_counter())
            called[0].set()
            return call("schedule_next_turn", {"wake_in_sec": 3600})
        return reply("Scheduled the next check in an hour.")

    model = ScriptedModel(default=model_step, record=False, check=False)
    session_id = f"wake-{time.perf_counter_ns()}"

    def build(extra: list[Any]) -> Agent:
        return Agent(model, tools=[CHECK, *extra], session=SessionRef(log, APP, USER, session_id))

    key = SessionKey(APP, USER, session_id)
    other = SqliteEventLog(log.path) if remote and isinstance(log, SqliteEventLog) else None
    latencies: list[float] = []
    async with start_autonomous(
        build,
        "Check the disks.",
        scheduler=scheduler,
        max_turns=repeats + 10,
        history_turns=HISTORY_TURNS,
        control_poll=control_poll,
    ) as handle:
        await handle.ready()
        if other is not None:
            await other.open()
        for i in range(repeats + 1):  # the first one is a warm-up
            with anyio.fail_after(30):
                await scheduler.sleeping.wait()
            await anyio.sleep(0.005 if not remote else 0.005 + (i % 7) * control_poll / 7)
            count = len(stamps)
            called[0] = anyio.Event()
            start = time.perf_counter()
            if other is not None:
                await send_inject(other, key, "wake")
            else:
                await handle.inject("wake")
            with anyio.fail_after(30):
                await called[0].wait()
            if i:
                latencies.append(stamps[count] - start)
        await handle.stop()
    if other is not None:
        await other.aclose()
    return latencies


def _p90(values: Sequence[float]) -> float:
    return (
        statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else values[0]
    )


def _parts(key: SessionKey) -> tuple[str, str, str]:
    return key.app, key.user, key.session_id


# ---- main -------------------------------------------------------------------------------


async def main(quick: bool, profile: bool) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    sizes = (100, 10_000) if quick else (100, 10_000, 100_000)
    print(
        f"python {sys.version.split()[0]}; command: python bench/resume.py"
        + (" --quick" if quick else "")
    )
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        built = await report_resume(tmp, sizes, repeats=5 if quick else 15)
        await report_wake(tmp, repeats=20 if quick else 40)
        if profile:
            size = max(built)
            path = tmp / f"session-{size}.db"
            for turns, runs in ((HISTORY_TURNS, 10), (0, 1)):
                print(
                    f"\ncProfile of {runs} resume(s) of the {built[size].events:,}-event"
                    f" session, history_turns={turns}"
                )
                print(await profile_resume(path, built[size], turns, runs))


async def report_resume(tmp: Path, sizes: Sequence[int], repeats: int) -> dict[int, Built]:
    """Print the resume table (one session per size, each in its own file); the sessions."""
    print(f"\nresume latency, SqliteEventLog, median of {repeats} fresh opens, milliseconds")
    print(
        f"{'events':>8} {'turns':>6} {'open':>6} {'lease':>6} {'ckpt':>6} {'restore':>8}"
        f" {'total':>7} {'p90':>7} {'msgs':>5} {'all-hist':>9} {'msgs':>6}"
    )
    built_by_size: dict[int, Built] = {}
    results: dict[int, dict[str, Any]] = {}
    for size in sizes:
        path = tmp / f"session-{size}.db"  # one session per file: the file grows with it
        started = time.perf_counter()
        built = built_by_size[size] = await build_session(path, size, f"disk-{size}")
        build_s = time.perf_counter() - started
        whole_repeats = repeats if built.events <= 10_000 else max(3, repeats // 5)
        r = results[size] = await bench_resume(path, built, repeats, whole_repeats)
        print(
            f"{built.events:>8,} {built.turns:>6,} {r['open']:>6.2f} {r['lease']:>6.2f}"
            f" {r['ckpt']:>6.2f} {r['restore']:>8.2f} {r['total']:>7.2f} {r['total_p90']:>7.2f}"
            f" {r['messages']:>5} {r['whole']:>9.1f} {r['whole_messages']:>6,}"
            f"   (built in {build_s:.1f} s)"
        )
    print(
        f"  (one session per file; restore and total load the last {HISTORY_TURNS} turns,"
        " all-hist the whole history: history_turns=0; msgs: messages in the first model call)"
    )
    small, big = results[sizes[0]], results[sizes[-1]]
    print(
        f"  growth {sizes[-1]:,} vs {sizes[0]} events: lease x{big['lease'] / small['lease']:.2f},"
        f" ckpt x{big['ckpt'] / small['ckpt']:.2f}, restore x{big['restore'] / small['restore']:.2f},"
        f" total x{big['total'] / small['total']:.2f}"
    )
    if sizes[-1] >= 100_000:
        print(f"  target: total < 100 ms at 100,000 events: {big['total']:.1f} ms")
    return built_by_size


async def report_wake(tmp: Path, repeats: int) -> None:
    """Print the inject-to-wake table: through the handle, then from another connection."""
    print(f"\ninject-to-wake latency while SleepScheduler sleeps, {repeats} wakes, milliseconds")
    print(f"{'path':<46} {'median':>8} {'p90':>8} {'max':>8}")
    db = tmp / "wake.db"
    cases: list[tuple[str, Callable[[], Awaitable[list[float]]]]] = [
        ("handle.inject, MemoryEventLog", lambda: bench_wake(MemoryEventLog(), repeats)),
        ("handle.inject, SqliteEventLog", lambda: _with_sqlite(db, repeats)),
        (
            "send_inject, 2nd connection, control_poll=0.05",
            lambda: _with_sqlite(db, repeats, remote=True, poll=0.05),
        ),
        (
            "send_inject, 2nd connection, control_poll=0.5",
            lambda: _with_sqlite(db, max(10, repeats // 2), remote=True, poll=0.5),
        ),
    ]
    medians = []
    for name, run in cases:
        lat = await run()
        medians.append(statistics.median(lat) * 1e3)
        print(
            f"{name:<46} {medians[-1]:>8.2f} {_p90(lat) * 1e3:>8.2f}"
            f" {max(lat) * 1e3:>8.2f}   (n={len(lat)})"
        )
    print(f"  target: handle.inject median < 10 ms: {medians[0]:.2f} ms (MemoryEventLog)")


async def _with_sqlite(
    path: Path, repeats: int, *, remote: bool = False, poll: float = 0.5
) -> list[float]:
    async with SqliteEventLog(path) as log:
        return await bench_wake(log, repeats, remote=remote, control_poll=poll)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller sessions")
    parser.add_argument("--profile", action="store_true", help="also profile one large resume")
    args = parser.parse_args()
    anyio.run(main, args.quick, args.profile)

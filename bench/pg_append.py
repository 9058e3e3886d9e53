"""PostgresEventLog's cost per model call against a bare psycopg loop committing one row per step.

The figure of ``bench/overhead.py``'s "x floor" column, on PostgreSQL: T model calls of the same
one-tool loop (T-1 calls of an async ``tick(n) -> n + 1``, then a final answer) on
ScriptedModel, in-process, logging off, run by ``run_autonomous`` on a ``PostgresEventLog``
(the lease taken, every step's batch appended fenced by it, renewed, the last batch appended
with the release), next to the floor: the same scripted calls with no runtime around them,
each step INSERTing one row of its last message and committing it, on one psycopg connection in
autocommit mode (one statement, one round trip, one commit per step: the least a durable step
costs on this server). Both run at ``synchronous_commit`` on and off (set per connection in the
DSN's ``options``), at T=50 and T=500. They take turns, round after round, their order
rotating, so that the machine's drift falls on both alike; "x floor" is the median of the
ratios taken round by round. Goal: within 1.5x. Also commits per model call (each append
batch and lease write is one transaction).

A second table times the appends alone (as ``bench/eventlog_append.py`` does for SQLite): the
batch one model call appends (an answer with one tool call and its result; with a checkpoint at
a turn's end), fenced by a held lease, against the floor's one-row INSERT, in alternating
rounds; "x floor" is again the median of per-round ratios. Its CPU columns split an append's
cost: this process's CPU time ("client") and that of the server processes serving the
contender's connections ("server", read from /proc: only for a server on this host), each
per append over all rounds, and as a multiple of the floor's. Its line "statement alone" is
the log's own append statement for that batch with none of the log around it: sent on a
connection of its own, prepared, its parameters built beforehand.

A third table puts the two together, at the larger T: the least a model call could cost in
this design, the loop with no store (``run_autonomous`` on no log, timed with the others in
the first table) plus the statement alone, against the floor's step. It leaves out the run's
events, its lease and last batch, and the log's layers (the pool, the timeout's scope, the
checks, the parameters), so the library cannot do better than it without a cheaper loop, a
cheaper statement or appends that do not wait.

Everything happens in a fresh schema of the server's database, dropped at the end.

    python bench/pg_append.py                 # postgresql://127.0.0.1:5432/test, a few minutes
    python bench/pg_append.py --quick         # fewer rounds
    python bench/pg_append.py --dsn postgresql://host/db
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import itertools
import json
import logging
import os
import secrets
import shlex
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import psycopg
import structlog
from overhead import TICK, CountingLog, library_run, paired, script, tick, timed

from autonomous.testing import ScriptedModel
from eventlog import (
    AssistantMessage,
    Checkpoint,
    Event,
    EventLog,
    LeaseHolder,
    PostgresEventLog,
    SessionKey,
    ToolCallRecord,
    ToolResult,
)
from eventlog._postgres import _batch as pg_batch  # the bare statement's parameters
from eventlog._postgres import _sql as pg_sql

#: The server the figures are taken on unless ``--dsn`` (or AUTONOMOUS_BENCH_PG) says another.
DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"
#: synchronous_commit levels, as the table names them.
LEVELS = ("on", "off")
TS = (50, 500)
FLOOR_TABLE = "bench_steps"
#: The application_name of the floor's connection and of the log's pool.
FLOOR_APP, LOG_APP = "bench-floor", "bench-log"
#: The application_name of the connection that sends the log's append statement bare.
BARE_APP = "bench-bare"
FLOOR_PAYLOAD = json.dumps({"text": "", "turn": 3, "tool_calls": [["c1", "tick", '{"n": 3}']]})


# ---- the server -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def fresh_schema(dsn: str) -> AsyncIterator[str]:
    """A new, empty schema of ``dsn``'s database for this run (its name), dropped at the end."""
    schema = f"bench_{secrets.token_hex(6)}"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield schema
        finally:
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def level_dsn(dsn: str, schema: str, level: str, app: str = "bench") -> str:
    """``dsn`` whose connections use ``schema`` and ``synchronous_commit = level``, named
    ``app`` (their ``application_name``: how the server's processes serving them are found)."""
    options = quote(f"-csearch_path={schema} -csynchronous_commit={level}")
    return f"{dsn}{'&' if '?' in dsn else '?'}options={options}&application_name={app}"


async def backends(conn: psycopg.AsyncConnection[Any], app: str) -> list[int]:
    """The pids of the server processes serving connections named ``app``."""
    cursor = await conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)
    )
    return [row[0] for row in await cursor.fetchall()]


def cpu_seconds(pids: list[int]) -> float | None:
    """CPU seconds (user and system) the processes ``pids`` used so far, from /proc; ``None``
    when they cannot be read (a server on another host)."""
    total = 0
    try:
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
    except (OSError, IndexError, ValueError):
        return None
    return total / os.sysconf("SC_CLK_TCK")


async def open_floor(dsn: str) -> psycopg.AsyncConnection[Any]:
    """The floor's connection (autocommit: each INSERT commits) and its table."""
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await conn.execute(
        f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id BIGSERIAL PRIMARY KEY, payload TEXT)"
    )
    return conn


async def setting(conn: psycopg.AsyncConnection[Any], name: str) -> str:
    """A server setting as ``conn`` sees it (to show the DSN's options took)."""
    cursor = await conn.execute("SELECT current_setting(%s)", (name,))
    row = await cursor.fetchone()
    assert row is not None
    return str(row[0])


# ---- per model call ---------------------------------------------------------------------


async def bare_pg_loop(steps: list[Any], conn: psycopg.AsyncConnection[Any]) -> None:
    """The floor: the scripted calls and tool calls, each step's last message committed as one
    row (bench/overhead.py's bare loop, with psycopg in place of aiosqlite)."""
    model = ScriptedModel(steps, record=False, check=False)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    specs = [TICK.spec()]
    insert = f"INSERT INTO {FLOOR_TABLE} (payload) VALUES (%s)"
    while True:
        response = await model.complete(messages, specs)
        messages.append({"role": "assistant", "content": response.text})
        for c in response.tool_calls:
            result = await tick(**json.loads(c.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": str(result)})
        await conn.execute(insert, (json.dumps(messages[-1]),))
        if not response.tool_calls:
            return


async def per_call(
    calls: int, repeats: int, floor: psycopg.AsyncConnection[Any], log: PostgresEventLog, tag: str
) -> dict[str, float]:
    """Microseconds per model call of the floor, of the library and of the library with no
    store (its loop alone) at one T, the library's per-round ratio to the floor, and its
    commits per model call."""
    steps = script(calls)
    counter = CountingLog(log)  # type: ignore[arg-type]
    n = 0

    async def one() -> None:
        nonlocal n
        n += 1
        await library_run(steps, counter, f"{tag}-{calls}-{n}")  # type: ignore[arg-type]

    async def no_store() -> None:
        await library_run(steps, None, "")

    times = await timed(
        {"floor": lambda: bare_pg_loop(steps, floor), "postgres": one, "no store": no_store},
        repeats,
    )
    out = {name: statistics.median(t) / calls * 1e6 for name, t in times.items()}
    out["x_floor"] = paired(times, "postgres", "floor")
    counter.commits = 0
    await one()
    out["commits_per_call"] = counter.commits / calls
    return out


# ---- per append -------------------------------------------------------------------------


def loop_batch(key: SessionKey, n: int, *, checkpoint: bool) -> list[Event]:
    """What one model call appends: an answer with one tool call, its result, maybe a
    checkpoint (bench/eventlog_append.py's batch)."""
    call_id = f"call-{n}"
    answer = AssistantMessage(
        text="",
        turn=n,
        tool_calls=(ToolCallRecord(call_id, "tick", f'{{"n": {n}}}'),),
        model="scripted",
        input_tokens=120 + n,
        output_tokens=12,
        cost_usd=0.00042,
    )
    batch = [
        Event.create(key, answer, author="agent"),
        Event.create(key, ToolResult(call_id, "tick", str(n + 1), n), author="agent"),
    ]
    if checkpoint:
        totals = Checkpoint(n, 120 * n, 12 * n, 0.00042 * n, "go on")
        batch.append(Event.create(key, totals, author="agent"))
    return batch


Contender = Callable[[int], Awaitable[None]]


@dataclasses.dataclass
class Samples:
    """One contender's rounds: microseconds per append of each, and the CPU seconds it used
    over all of them, here and on the server (``None``: the server's processes not readable)."""

    micros: list[float] = dataclasses.field(default_factory=list)
    client: float = 0.0
    server: float | None = 0.0


@dataclasses.dataclass(frozen=True)
class Appended:
    """A contender's line of the per-append table: the median microseconds per append, its
    median per-round ratio to the floor, and the CPU microseconds per append (over all
    rounds) of this process and of the server."""

    micros: float
    ratio: float
    client: float
    server: float | None


def floor_contender(conn: psycopg.AsyncConnection[Any]) -> Contender:
    """``n`` floor appends: one INSERT each, committed by autocommit."""
    insert = f"INSERT INTO {FLOOR_TABLE} (payload) VALUES (%s)"

    async def run(n: int) -> None:
        for _ in range(n):
            await conn.execute(insert, (FLOOR_PAYLOAD,))

    return run


async def fenced_contender(log: EventLog, key: SessionKey, *, checkpoint: bool) -> Contender:
    """``n`` appends of loop batches to ``log``, fenced by a lease on ``key`` held throughout."""
    lease = await log.acquire_lease(key, LeaseHolder.this_process(), 3600)
    pool: Iterator[list[Event]] = itertools.cycle(
        [loop_batch(key, n, checkpoint=checkpoint) for n in range(1000)]
    )

    async def run(n: int) -> None:
        append = log.append
        for _ in range(n):
            await append(next(pool), lease=lease)

    return run


async def bare_contender(
    conn: psycopg.AsyncConnection[Any], log: EventLog, key: SessionKey
) -> Contender:
    """``n`` fenced appends of loop batches as the log's statement alone: on ``conn``, a
    connection of its own, prepared, its parameters built beforehand; none of the log's
    layers (the pool, the timeout's scope, the checks, building the parameters)."""
    lease = await log.acquire_lease(key, LeaseHolder.this_process(), 3600)
    cursor = conn.cursor()
    await cursor.execute(pg_sql.SELECT_SID, pg_sql.key_params(key))
    row = await cursor.fetchone()
    assert row is not None  # the lease added the session
    sids, fence = {key: row[0]}, (lease.holder.token, lease.epoch)
    statements = [
        pg_batch.append_params(loop_batch(key, n, checkpoint=False), sids, channel="", fence=fence)
        for n in range(1000)
    ]
    assert all(query is not pg_sql.APPEND for query, _ in statements)  # a model call's batch
    pool = itertools.cycle(statements)

    async def run(n: int) -> None:
        for _ in range(n):
            query, params = next(pool)
            await cursor.execute(query, params, prepare=True)
            assert len(await cursor.fetchall()) == 2  # fenced by a lease still held

    return run


async def race(
    contenders: dict[str, tuple[Contender, str]],
    probe: psycopg.AsyncConnection[Any],
    per_round: int,
    rounds: int,
) -> dict[str, Samples]:
    """Each contender's rounds (a contender: its appends, and the application_name of its
    connections, whose server processes ``probe`` finds); every other round runs them in
    reverse order (a warm-up round first)."""
    samples = {name: Samples() for name in contenders}
    for run, _ in contenders.values():
        await run(max(1, per_round // 4))
    for r in range(rounds):
        names = list(contenders)
        if r % 2:
            names.reverse()
        for name in names:
            run, app = contenders[name]
            pids = await backends(probe, app)
            gc.collect()
            cpu, server = time.process_time(), cpu_seconds(pids)
            start = time.perf_counter()
            await run(per_round)
            took = time.perf_counter() - start
            server_after = cpu_seconds(pids)
            sample = samples[name]
            sample.micros.append(took / per_round * 1e6)
            sample.client += time.process_time() - cpu
            if server is None or server_after is None or sample.server is None:
                sample.server = None
            else:
                sample.server += server_after - server
    return samples


async def per_append(
    rounds: int,
    per_round: int,
    floor: psycopg.AsyncConnection[Any],
    log: PostgresEventLog,
    bare_dsn: str,
) -> dict[str, Appended]:
    """Each contender's line of the per-append table."""
    level = await setting(floor, "synchronous_commit")
    bare = await psycopg.AsyncConnection.connect(bare_dsn, autocommit=True)
    try:
        bare_key = SessionKey("bench", "append", f"bare-{level}")
        contenders = {
            "psycopg floor (1 row)": (floor_contender(floor), FLOOR_APP),
            "statement alone, 2": (await bare_contender(bare, log, bare_key), BARE_APP),
            "postgres, 2 events": (
                await fenced_contender(
                    log, SessionKey("bench", "append", f"two-{level}"), checkpoint=False
                ),
                LOG_APP,
            ),
            "postgres, 3 events": (
                await fenced_contender(
                    log, SessionKey("bench", "append", f"three-{level}"), checkpoint=True
                ),
                LOG_APP,
            ),
        }
        samples = await race(contenders, floor, per_round, rounds)
    finally:
        await bare.close()
    base = samples["psycopg floor (1 row)"].micros
    appends = rounds * per_round
    return {
        name: Appended(
            statistics.median(sample.micros),
            statistics.median(a / b for a, b in zip(sample.micros, base, strict=True)),
            sample.client / appends * 1e6,
            None if sample.server is None else sample.server / appends * 1e6,
        )
        for name, sample in samples.items()
    }


# ---- the run ----------------------------------------------------------------------------


Results = tuple[dict[int, dict[str, float]], dict[str, Appended]]


async def bench_level(dsn: str, schema: str, level: str, repeats: int, rounds: int) -> Results:
    """Every figure at one synchronous_commit level."""
    floor = await open_floor(level_dsn(dsn, schema, level, FLOOR_APP))
    try:
        seen = await setting(floor, "synchronous_commit")
        assert seen == level, f"the DSN asked for synchronous_commit={level}, the server has {seen}"
        async with PostgresEventLog(level_dsn(dsn, schema, level, LOG_APP)) as log:
            calls = {t: await per_call(t, repeats, floor, log, level) for t in TS}
            bare_dsn = level_dsn(dsn, schema, level, BARE_APP)
            appends = await per_append(rounds, 200, floor, log, bare_dsn)
    finally:
        await floor.close()
    return calls, appends


def report(results: dict[str, Results], repeats: int, rounds: int) -> None:
    """Print both tables."""
    print(f"\nper model call: median of {repeats} runs; microseconds per model call")
    print(f"{'T':>4} {'sync':>5} {'floor':>8} {'postgres':>9} {'x floor':>8} {'commits':>8}")
    for level, (calls, _) in results.items():
        for t, r in calls.items():
            print(
                f"{t:>4} {level:>5} {r['floor']:>8.1f} {r['postgres']:>9.1f}"
                f" {r['x_floor']:>8.2f} {r['commits_per_call']:>8.2f}"
            )
    print(
        f"\nper append: median of {rounds} rounds of 200, microseconds per append; CPU"
        " microseconds per append over all rounds (x: the floor's multiple)"
    )
    print(
        f"{'sync':>5} {'':<24}{'us/append':>10}{'us/event':>10}{'x floor':>9}"
        f"{'client':>9}{'x':>6}{'server':>9}{'x':>6}"
    )
    for level, (_, appends) in results.items():
        base = appends["psycopg floor (1 row)"]
        for name, line in appends.items():
            events = 1 if "floor" in name else int(name.split(", ")[1][0])
            client = f"{line.client:>9.1f}{line.client / base.client:>6.2f}"
            if line.server is None or base.server is None:
                server = f"{'n/a':>9}{'':>6}"
            else:
                server = f"{line.server:>9.1f}{line.server / base.server:>6.2f}"
            print(
                f"{level:>5} {name:<24}{line.micros:>10.1f}{line.micros / events:>10.2f}"
                f"{line.ratio:>9.2f}{client}{server}"
            )
    report_bound(results)


def report_bound(results: dict[str, Results]) -> None:
    """The least a model call could cost on this server in this design: the loop with no
    store plus the fenced statement alone, against the floor's step, at the larger T."""
    t = max(TS)
    print(
        f"\nat best, T={t}, us per model call: the loop with no store, plus the statement"
        " alone (no pool, no scope, no checks, its parameters ready), against the floor's step;"
        " this leaves out the run's events, its lease, its last batch and the log's layers"
    )
    print(
        f"{'sync':>5}{'loop':>8}{'statement':>11}{'sum':>8}{'floor':>8}{'x floor':>9}"
        f"{'postgres':>10}{'x floor':>9}"
    )
    for level, (calls, appends) in results.items():
        line = calls[t]
        loop, statement = line["no store"], appends["statement alone, 2"].micros
        least = loop + statement
        print(
            f"{level:>5}{loop:>8.1f}{statement:>11.1f}{least:>8.1f}{line['floor']:>8.1f}"
            f"{least / line['floor']:>9.2f}{line['postgres']:>10.1f}{line['x_floor']:>9.2f}"
        )


async def main(dsn: str, quick: bool, command: str) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    repeats, rounds = (5, 7) if quick else (25, 21)
    print(f"$ {command}")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        version = await setting(conn, "server_version")
    print(
        f"python {sys.version.split()[0]}; psycopg {psycopg.__version__};"
        f" PostgreSQL {version} at {dsn}"
    )
    async with fresh_schema(dsn) as schema:
        print(f"schema {schema} (dropped at the end)")
        results = {
            level: await bench_level(dsn, schema, level, repeats, rounds) for level in LEVELS
        }
    report(results, repeats, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("AUTONOMOUS_BENCH_PG", DEFAULT_DSN),
        help=f"the server (default {DEFAULT_DSN}, or AUTONOMOUS_BENCH_PG)",
    )
    args = parser.parse_args()
    command = shlex.join([os.path.relpath(sys.executable), *sys.argv])
    anyio.run(main, args.dsn, args.quick, command)

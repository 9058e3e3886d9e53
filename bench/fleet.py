"""A fleet of daemons over one PostgreSQL log: exactly-once resumes, wake lag, claims, takeover.

N daemon processes (``autonomous daemon --db DSN``) share S deferred sessions whose wake
times are spread at random over a window (sessions seeded by copying one real run's events,
as the fleet tests do; the scripted model of ``tests/fleet/fleet_brains.py``: each wake turn
reports done at once). Then, from the log alone:

    duplicates  wakes whose turn ran more than once (extra runs; goal 0)
    missed      wakes whose turn never ran (goal 0)
    wake lag    the start of each wake's turn (its prompt's time) minus its next_wake_at,
                p50 / p99 / max in ms (goal p99 < 1 s)
    claims/s    resumes per second: the mean from the first wake turn to the last, and the
                peak over one-second windows
    takeover    gated sessions (their wake turn waits in a tool) held by one daemon, that
                daemon SIGKILLed: time from the kill to another daemon's first write in each
                of its sessions (the lease must expire first: --lease-ttl)

The log is a fresh schema of the test server (AUTONOMOUS_TEST_PG or
postgresql://127.0.0.1:5432/test), dropped afterwards; ``--db`` names another (a DSN or a
SQLite file), left as it is.

    python bench/fleet.py                                   # 4 daemons, 10,000 sessions, 60 s
    python bench/fleet.py --sessions 1000 --spread 10       # a quick look
    python bench/fleet.py --daemons 2 --no-takeover
"""

from __future__ import annotations

import argparse
import contextlib
import random
import secrets
import shlex
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the fleet tests' harness is shared with this bench

from eventlog import Event, SessionKey  # noqa: E402
from tests.fleet.daemons import Fleet  # noqa: E402
from tests.fleet.harness import (  # noqa: E402
    APP,
    USER,
    duplicates_and_missed,
    histories,
    is_postgres,
    lease_options,
    seed,
    session_keys,
    stop_reasons,
    template_events,
    wait_until,
    wakes_of,
    write_agent,
)
from tests.support.postgres import server_dsn, with_schema  # noqa: E402


@contextlib.contextmanager
def fresh_schema() -> Iterator[str]:
    """A DSN of a new schema on the test server, dropped afterwards."""
    import psycopg

    base = server_dsn()
    schema = f"bench_{secrets.token_hex(6)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield with_schema(base, schema)
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextlib.contextmanager
def completed_counter(db: str, keys: list[SessionKey]) -> Iterator[Callable[[], int]]:
    """A look at how many of ``keys`` have completed, cheap enough to take every second while
    the daemons are measured: on PostgreSQL one count on one connection, not a listing of
    every session through a new log each time (that was a few per cent of the machine)."""
    if not is_postgres(db):
        yield lambda: sum(stop_reasons(db).get(k) == "completed" for k in keys)
        return
    import psycopg

    ids = [k.session_id for k in keys]
    with psycopg.connect(db, autocommit=True) as conn:
        query = (
            'SELECT count(*) FROM eventlog_sessions WHERE app = %s AND "user" = %s'
            " AND stop_reason = 'completed' AND session_id = ANY(%s)"
        )

        def count() -> int:
            row = conn.execute(query, (APP, USER, ids)).fetchone()
            return int(row[0]) if row else 0

        yield count


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


#: Appends in flight at once while seeding.
SEED_CONCURRENCY = 4


def calibrate(db: str, template: list[Event], sessions: int) -> float:
    """About how long seeding ``sessions`` takes: a timed seed of a few sessions due in a year
    (never due during the bench)."""
    probe = max(min(sessions // 20, 500), 10)
    later = datetime.now(UTC) + timedelta(days=365)
    began = time.monotonic()
    seed(
        db,
        template,
        dict.fromkeys(session_keys(probe, prefix="calib"), later),
        concurrency=SEED_CONCURRENCY,
    )
    return (time.monotonic() - began) * sessions / probe


def main_phase(args: argparse.Namespace, fleet: Fleet, work: Path) -> None:
    """Seed the sessions, let the daemons resume them, and report what the log says."""
    spec = write_agent(fleet.agent_dir, "waking", lease_ttl=args.lease_ttl)
    template = template_events(fleet.agent_dir, spec, work)
    keys = session_keys(args.sessions)
    rng = random.Random(args.seed)
    lead = args.lead + 1.5 * calibrate(fleet.db, template, len(keys))
    first = datetime.now(UTC) + timedelta(seconds=lead)
    wakes = {k: first + timedelta(seconds=rng.uniform(0, args.spread)) for k in keys}
    began = time.monotonic()
    seed(fleet.db, template, wakes, concurrency=SEED_CONCURRENCY)
    took = time.monotonic() - began
    print(f"seeded {len(keys)} sessions in {took:.1f} s, the first due {lead - took:.1f} s after")
    for n in range(args.daemons):
        fleet.start(
            f"daemon{n}",
            poll=args.poll,
            max_concurrent=args.max_concurrent,
            options=lease_options(args.lease_ttl),
        )

    with completed_counter(fleet.db, keys) as completed:
        wait_until(
            "every session completed",
            lambda: completed() == len(keys),
            timeout=args.spread + 600,
            every=1,
        )
    found = [wakes_of(k, e) for k, e in histories(fleet.db, keys).items()]
    extra, missed = duplicates_and_missed(found, 1)
    lags = [lag * 1000 for w in found for lag in w.lags]
    print(f"duplicates {extra}  missed {missed}  (of {len(keys)} wakes)")
    print(
        f"wake lag ms: p50 {percentile(lags, 0.5):.0f}  p99 {percentile(lags, 0.99):.0f}  "
        f"max {max(lags):.0f}  (goal p99 < 1000)"
    )
    starts = sorted(wakes[w.key].timestamp() + w.lags[0] for w in found if w.lags)
    window = starts[-1] - starts[0]
    per_second: dict[int, int] = {}
    for t in starts:
        per_second[int(t)] = per_second.get(int(t), 0) + 1
    print(
        f"claims/s: mean {len(starts) / window if window > 0 else float('nan'):.0f} over "
        f"{window:.1f} s  peak {max(per_second.values())} in one second"
    )


def takeover_phase(args: argparse.Namespace, fleet: Fleet, work: Path) -> None:
    """Kill the daemon holding the most gated sessions; time until others write in them."""
    from tests.fleet.harness import in_gate

    gated = write_agent(fleet.agent_dir, "gated", name="gated", lease_ttl=args.lease_ttl)
    template = template_events(fleet.agent_dir, gated, work / "gated")
    keys = session_keys(args.daemons * 2, prefix="g")
    seed(fleet.db, template, dict.fromkeys(keys, datetime.now(UTC)))
    inside: dict[str, list[object]] = {}

    def all_in_gate() -> bool:
        logs = histories(fleet.db, keys)
        inside.clear()
        for daemon in fleet.daemons:
            inside[daemon.name] = [k for k, e in logs.items() if in_gate(e, daemon.identity)]
        return sum(len(v) for v in inside.values()) == len(keys)

    wait_until("every gated session in its gate", all_in_gate, timeout=60)
    victim = max(fleet.daemons, key=lambda d: len(inside[d.name]))
    held = [k for k in keys if k in inside[victim.name]]
    last = {k: e[-1].seq for k, e in histories(fleet.db, held).items()}
    killed = datetime.now(UTC)
    victim.signal(signal.SIGKILL)
    (fleet.agent_dir / "gate").touch()

    def all_done() -> bool:
        reasons = stop_reasons(fleet.db)
        return all(reasons.get(k) == "completed" for k in keys)

    wait_until("the gated sessions completed", all_done, timeout=120, every=0.5)
    taken = []
    for key, events in histories(fleet.db, held).items():
        after = next(e for e in events if e.seq > last[key])
        taken.append((after.at - killed).total_seconds())
    print(
        f"takeover after SIGKILL ({len(held)} sessions of {victim.name}, lease ttl "
        f"{args.lease_ttl:g} s, poll {args.poll:g} s): median {statistics.median(taken):.2f} s  "
        f"max {max(taken):.2f} s  (one host: the store may take a dead local pid's lease at once)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--daemons", type=int, default=4)
    parser.add_argument("--spread", type=float, default=60.0, help="seconds the wakes span")
    parser.add_argument(
        "--lead", type=float, default=10.0, help="seconds from the end of seeding to the first wake"
    )
    # A slot is held from the claim, up to --poll ahead of the wake, to the end of the turn:
    # at ~42 resumes/s per daemon (10,000 over a minute, 4 daemons) that is ~30 slots busy.
    parser.add_argument("--max-concurrent", type=int, default=64)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--db", help="a DSN or a SQLite file (default: a fresh schema)")
    parser.add_argument("--no-takeover", action="store_true")
    args = parser.parse_args()
    print("$ python " + shlex.join(sys.argv), flush=True)
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-fleet-")))
        agent = work / "agent"
        agent.mkdir()
        (work / "gated").mkdir()
        db = args.db or stack.enter_context(fresh_schema())
        fleet = Fleet(agent, db)
        stack.callback(fleet.close)
        main_phase(args, fleet, work)
        if not args.no_takeover:
            takeover_phase(args, fleet, work)


if __name__ == "__main__":
    main()

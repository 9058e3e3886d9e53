"""Inject-to-wake through PostgreSQL: a live run in one process, injects from another.

``autonomous run`` (a ``sleep`` scheduler: the run waits in its process; the scripted model
of ``tests/fleet/fleet_brains.py`` sleeps an hour after every turn) holds a session of the
log; this process injects into it with the library's remote inject (``send_inject`` on a
PostgresEventLog of its own), once it sleeps, one message at a time. For each, from the log:

    turn      the start of the turn the message woke (its prompt's time) minus the send time
    delivered the run's ``inbox_delivered`` event (appended when that turn ends) minus the
              send time

median, p90 and p99 in ms (goal: median under 20 ms), with the run's ``control_poll`` (the
fallback when no notification comes) shown beside them. The send time is taken just before
``send_inject`` (which checks the session is not finished, then appends and commits).

    python bench/inject_wake.py                    # 200 injects, control_poll 0.5 s
    python bench/inject_wake.py --injects 50 --control-poll 2
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the fleet tests' harness is shared with this bench

import anyio  # noqa: E402

from autonomous import send_inject  # noqa: E402
from eventlog import Checkpoint, EventKind, EventLog, InboxDelivered, SessionKey  # noqa: E402
from tests.fleet.daemons import ENV  # noqa: E402
from tests.fleet.harness import APP, USER, open_store, write_agent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import fresh_schema, percentile  # noqa: E402

SESSION = SessionKey(APP, USER, "inject-bench")


async def wait_asleep(log: EventLog, after: int, deadline: float) -> int:
    """Wait until the session's newest checkpoint after seq ``after`` schedules a wake (the
    run sleeps); its seq."""
    while time.monotonic() < deadline:
        latest = await log.latest_checkpoint(SESSION)
        if latest is not None and latest.seq > after:
            p = latest.payload
            if isinstance(p, Checkpoint) and p.next_wake_at is not None:
                return latest.seq
        await anyio.sleep(0.01)
    raise SystemExit("the run never went to sleep")


async def one_inject(log: EventLog, n: int, asleep: int) -> tuple[float, float, int]:
    """Inject once into the sleeping run; (ms to its turn's start, ms to inbox_delivered, the
    seq of the checkpoint it went back to sleep on)."""
    sent = datetime.now(UTC)
    message_id = await send_inject(log, SESSION, f"ping {n}")
    deadline = time.monotonic() + 30
    turn = delivered = None
    while delivered is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"inject {n} was never delivered")
        await anyio.sleep(0.005)
        for event in await log.read(SESSION, after_seq=asleep):
            if event.kind is EventKind.USER_MESSAGE and turn is None:
                turn = event.at
            p = event.payload
            if isinstance(p, InboxDelivered) and message_id in p.message_ids:
                delivered = event.at
    assert turn is not None
    back = await wait_asleep(log, asleep, time.monotonic() + 30)
    ms = lambda at: (at - sent).total_seconds() * 1000  # noqa: E731
    return ms(turn), ms(delivered), back


async def measure(db: str, injects: int) -> tuple[list[float], list[float]]:
    """Inject ``injects`` times, each once the run sleeps again."""
    turns, delivered = [], []
    async with open_store(db) as log:
        asleep = await wait_asleep(log, 0, time.monotonic() + 60)
        for n in range(injects):
            to_turn, to_delivered, asleep = await one_inject(log, n, asleep)
            turns.append(to_turn)
            delivered.append(to_delivered)
    return turns, delivered


def show(name: str, values: list[float]) -> str:
    """One line of figures."""
    return (
        f"{name:<10} median {statistics.median(values):6.1f}  p90 {percentile(values, 0.9):6.1f}  "
        f"p99 {percentile(values, 0.99):6.1f}  max {max(values):6.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--injects", type=int, default=200)
    parser.add_argument("--control-poll", type=float, default=0.5)
    parser.add_argument("--db", help="a DSN or a SQLite file (default: a fresh schema)")
    args = parser.parse_args()
    print("$ python " + shlex.join(sys.argv), flush=True)
    with contextlib.ExitStack() as stack:
        agent = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-inject-")))
        db = args.db or stack.enter_context(fresh_schema())
        spec = write_agent(
            agent,
            "sleeper",
            name="sleeper",
            control_poll=args.control_poll,
            scheduler="sleep",
            max_turns=args.injects + 10,
        )
        command = [sys.executable, "-m", "autonomous", "run", str(spec), "--db", db]
        run = subprocess.Popen(
            [*command, "--session", SESSION.session_id, "--json", "-q"],
            cwd=agent,
            env=ENV,
            stdout=subprocess.DEVNULL,
        )
        stack.callback(run.wait, 30)
        stack.callback(run.terminate)
        turns, delivered = anyio.run(measure, db, args.injects, backend="asyncio")
    print(
        f"{args.injects} injects from another process, the run's control_poll {args.control_poll:g} s; ms:"
    )
    print(show("turn", turns))
    print(show("delivered", delivered))


if __name__ == "__main__":
    main()

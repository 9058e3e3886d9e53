"""A daemon's shutdown is bounded whatever the store does: a claim, a renewal, a hand-back
that the store never answers holds it no longer than its bound (DESIGN item 25).

In-process, on a log that stops answering when told (its calls hang until cancelled, as on a
network partition) and a FakeClock for the daemon's bounds; the runs' own last writes run on
real time, made short here.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
import structlog

from autonomous import run_autonomous
from autonomous._cli._common import record_spec
from autonomous._cli._daemon import Daemon
from autonomous._run import _run as run_module
from autonomous.fleet import _claims as daemon_module
from autonomous.spec import load_spec
from eventlog import EventKind, PostgresEventLog, SessionKey
from scheduler import FakeClock

from ..support.postgres import wait_blocked_by
from ..support.stuck_logs import StuckLog
from .conftest import write_spec

pytestmark = pytest.mark.anyio

#: Real seconds a shutdown may take beyond its bounds (a machine shared with others).
SLACK = 1.5
DEFERRING = '[scheduler]\nkind = "exit"\n'


#: A spec that defers once, then (resumed) sleeps thirty seconds in a sync tool.
NAPPING = """
name = "nap"
app = "tests"
user = "tester"
model = "scripted:brains:deferring_then_napping"
goal = "Do the test thing."
tools = ["brains:nap"]
[scheduler]
kind = "exit"
"""


def napping(agent_dir: Path) -> bool:
    """Whether the nap tool has begun in ``agent_dir`` (the working directory)."""
    return any(agent_dir.glob("napping.*"))


class Stopping:
    """A daemon (not started) on a StuckLog, with deferred sessions due on its FakeClock."""

    def __init__(self, log: StuckLog, clock: FakeClock) -> None:
        self.log = log
        self.clock = clock
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.daemon = Daemon(
            log,
            poll=10,
            once=False,
            crashed=False,
            report=lambda event, **fields: self.reports.append((event, fields)),
            clock=clock,
            lease_ttl=30,
        )
        self.scope = anyio.CancelScope()
        self.ended = anyio.Event()

    @classmethod
    async def deferred(cls, agent_dir: Path, ids: Sequence[str]) -> Stopping:
        """Sessions of a spec that defers once, then ticks until an inbox message: due now."""
        spec = load_spec(write_spec(agent_dir, "later", "deferring_then_looping", extra=DEFERRING))
        clock = FakeClock()
        log = StuckLog(clock=clock.now)
        for session_id in ids:
            ref = spec.session_ref(log, session_id)
            await record_spec(log, ref.key, spec, None)
            result = await run_autonomous(spec.build_function(ref), spec.goal, **spec.run_options())
            assert result.next_wake_at is not None
            clock.advance(max((result.next_wake_at - clock.now()).total_seconds() + 1, 0))
        return cls(log, clock)

    async def serve(self) -> None:
        """The daemon until :attr:`scope` is cancelled; :attr:`ended` is set after."""
        with self.scope:
            await self.daemon.serve()
        self.ended.set()

    async def stopped_in_time(self, bound: float) -> bool:
        """Cancel the daemon, move its clock ``bound`` seconds on, and say whether it ended
        within SLACK real seconds of that; a daemon still going is let go (the store answers
        again) so that the test ends either way."""
        try:
            self.scope.cancel()
            await anyio.wait_all_tasks_blocked()
            self.clock.advance(bound)
            with anyio.move_on_after(SLACK):
                await self.ended.wait()
            return self.ended.is_set()
        finally:
            self.log.unstick()

    def events(self, name: str) -> list[dict[str, Any]]:
        """The fields of every ``name`` report so far."""
        return [fields for event, fields in self.reports if event == name]


async def until(condition: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (ten real seconds at most) until ``condition()`` holds."""
    for _ in range(1000):
        value = condition()
        if await value if inspect.isawaitable(value) else value:
            return
        await anyio.sleep(0.01)
    raise AssertionError("the condition never held")


class TestShutdownOnAStoreThatStopsAnswering:
    """SIGTERM (the daemon's cancellation) while the store answers nothing."""

    async def test_a_claim_in_flight_holds_it_no_longer_than_its_bound(
        self, in_process: Path
    ) -> None:
        """A claim the store never answers (shielded, so that a claim's result is known) is
        given up after its bound on the daemon's clock: the shutdown returns then."""
        stopping = await Stopping.deferred(in_process, ["c1"])
        stopping.log.stick()
        async with anyio.create_task_group() as tg:
            tg.start_soon(stopping.serve)
            await stopping.log.stalled.wait()  # the first claim hangs
            assert await stopping.stopped_in_time(daemon_module._CALL_TIMEOUT)
        assert [] == stopping.events("resuming")

    async def test_a_running_sessions_hand_back_shares_one_bound_with_its_release(
        self, in_process: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A session running when the store stops answering: its run's last writes (made
        0.2 s here) end, then its hand-back and lease release share one bound on the daemon's
        clock; the shutdown returns once that is up, and the run's missing final checkpoint
        is logged."""
        monkeypatch.setattr(run_module, "_FINAL_WRITE_TIMEOUT", 0.2)
        stopping = await Stopping.deferred(in_process, ["h1"])
        key = SessionKey("tests", "tester", "h1")

        async def ticking() -> bool:
            return len(await stopping.log.read(key, kinds=[EventKind.USER_MESSAGE])) >= 3

        with structlog.testing.capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stopping.serve)
                await until(ticking)
                stopping.log.stick()
                stopping.scope.cancel()
                # The run's last writes' time (real time) runs out, and it says so.
                await until(lambda: "final_checkpoint_not_written" in [e["event"] for e in logs])
                stalls = stopping.log.stalls
                assert await stopping.stopped_in_time(daemon_module._HAND_BACK_TIMEOUT)
        assert stalls >= 1
        assert ["final_checkpoint_not_written"] == [
            line["event"] for line in logs if line["event"] == "final_checkpoint_not_written"
        ]
        assert [] == stopping.events("handed_back")


@pytest.mark.postgres
class TestShutdownWithTheSessionRowLocked:
    """PostgreSQL, a running session's row locked by another transaction: the daemon's
    batched renewal, the run's last writes and the hand-back all wait for it."""

    async def test_the_shutdown_returns_within_its_bounds(
        self, in_process: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """SIGTERM (the daemon's cancellation) while its run sleeps in a tool and the batched
        renewal in flight waits for the row: the daemon returns within the run's last writes
        and the hand-back (0.5 s each here) and a little, not when the lock goes (the store's
        own timeout is 10 s)."""
        bound = 0.5
        monkeypatch.setattr(run_module, "_FINAL_WRITE_TIMEOUT", bound)
        monkeypatch.setattr(daemon_module, "_CALL_TIMEOUT", bound)
        monkeypatch.setattr(daemon_module, "_HAND_BACK_TIMEOUT", bound)
        monkeypatch.chdir(in_process)  # where the tool says it began
        path = in_process / "nap.toml"
        path.write_text(NAPPING)
        spec = load_spec(path)
        async with PostgresEventLog(pg_dsn) as log:
            ref = spec.session_ref(log, "p1")
            await record_spec(log, ref.key, spec, None)
            deferred = await run_autonomous(
                spec.build_function(ref), spec.goal, **spec.run_options()
            )
            wake = deferred.next_wake_at
            assert wake is not None
            await until(lambda: datetime.now(UTC) > wake)  # it deferred itself one second
            reports: list[str] = []
            # Renewals every 0.3 s: one waits for the row when the shutdown comes.
            daemon = Daemon(
                log,
                poll=0.2,
                once=False,
                crashed=False,
                report=lambda event, **fields: reports.append(event),
                lease_ttl=0.9,
            )
            scope, ended = anyio.CancelScope(), anyio.Event()

            async def serve() -> None:
                with scope:
                    await daemon.serve()
                ended.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                await until(lambda: napping(in_process))
                async with await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
                    await blocker.execute("SELECT sid FROM eventlog_sessions FOR UPDATE")
                    await wait_blocked_by(pg_dsn, blocker.info.backend_pid)
                    began = time.monotonic()
                    scope.cancel()
                    with anyio.move_on_after(2 * bound + SLACK):
                        await ended.wait()
                    took = time.monotonic() - began
                    await blocker.rollback()
        assert took < 2 * bound + SLACK, (took, reports)

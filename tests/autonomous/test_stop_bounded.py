"""A stop returns within its bounded last writes, whatever the store does (DESIGN item 25).

Two stores that do not answer: an in-memory log that hangs every call once told (a network
partition that resets nothing), driven on a FakeClock so that the last writes' time runs out
when the test says; and a real PostgreSQL log whose session row another transaction holds
locked (every write of the session waits for it), on real time with the last writes' time
made short. Each stop must return once that time is up, with the run's result and status as
a stop gives them, and a log line saying that the final checkpoint is missing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
import pytest
import structlog

from autonomous import (
    Agent,
    AutonomousStatus,
    StopReason,
    function_tool,
    run_autonomous,
    start_autonomous,
)
from autonomous._run import _run as run_module
from autonomous.testing import FakeClock, ScriptedModel, call, done
from eventlog import Checkpoint, PostgresEventLog, SessionRef

from ..support.postgres import wait_blocked_by
from ..support.stuck_logs import StuckLog

pytestmark = pytest.mark.anyio

#: The last writes' time (seconds on the run's clock): the final checkpoint's bound.
LAST_WRITES = run_module._FINAL_WRITE_TIMEOUT
#: Real seconds a stop may take beyond its bound (scheduling, a machine shared with others).
SLACK = 1.5


class Waiting:
    """A tool that waits until cancelled: the run is mid-turn when the store stops answering."""

    def __init__(self) -> None:
        self.entered = anyio.Event()

    async def wait_here(self) -> str:
        """Wait for the operator."""
        self.entered.set()
        await anyio.sleep_forever()
        return "never"

    def build(self, ref: SessionRef) -> Callable[[list[Any]], Agent]:
        """A build function for an agent on ``ref`` that calls this tool, then is done."""
        model = ScriptedModel([call("wait_here", {}), done()])

        def build(extra: list[Any]) -> Agent:
            return Agent(model, tools=[function_tool(self.wait_here), *extra], session=ref)

        return build


def missing_checkpoint_lines(logs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The log lines that say the final checkpoint was not written."""
    return [line for line in logs if line["event"] == "final_checkpoint_not_written"]


class TestStoreThatStopsAnswering:
    """Every call to the store hangs from the moment the run is mid-turn."""

    @pytest.fixture
    def log(self) -> StuckLog:
        """A durable in-memory log, answering until told to stop."""
        return StuckLog()

    @asynccontextmanager
    async def stuck_mid_turn(self, log: StuckLog, clock: FakeClock) -> AsyncIterator[Any]:
        """A run on ``log`` waiting in its tool, the log stuck from then on; the handle."""
        tool = Waiting()
        ref = SessionRef(log, "ops", "tester", "stuck")
        async with start_autonomous(tool.build(ref), "watch", clock=clock) as handle:
            await tool.entered.wait()
            log.stick()
            yield handle

    async def test_stop_returns_once_the_last_writes_time_is_up(self, log: StuckLog) -> None:
        """A handle's stop returns as soon as the run's clock passes the last writes' time,
        though the store answers none of them; the run is stopped, context_cancelled, and a
        log line says its final checkpoint is missing."""
        clock = FakeClock()
        with structlog.testing.capture_logs() as logs:
            async with self.stuck_mid_turn(log, clock) as handle:
                with anyio.fail_after(SLACK):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(handle.stop)
                        await log.stalled.wait()
                        clock.advance(LAST_WRITES)
                assert AutonomousStatus.STOPPED == handle.status
                result = await handle.wait()
        assert StopReason.CONTEXT_CANCELLED == result.reason
        assert 1 == len(missing_checkpoint_lines(logs))
        assert 0 == log.hanging

    async def test_leaving_the_block_is_as_bounded(self, log: StuckLog) -> None:
        """Leaving start_autonomous's block (which stops the run) returns once the last
        writes' time is up, the store answering nothing."""
        clock = FakeClock()

        async def advance_when_stalled() -> None:
            await log.stalled.wait()
            clock.advance(LAST_WRITES)

        with anyio.fail_after(SLACK):
            async with anyio.create_task_group() as tg:
                tg.start_soon(advance_when_stalled)
                async with self.stuck_mid_turn(log, clock) as handle:
                    began = time.monotonic()  # the block's shielded exit hides fail_after
        assert time.monotonic() - began < SLACK
        assert (AutonomousStatus.STOPPED, StopReason.CONTEXT_CANCELLED) == (
            handle.status,
            (await handle.wait()).reason,
        )

    async def test_a_callers_cancellation_is_as_bounded(self, log: StuckLog) -> None:
        """run_autonomous cancelled by its caller (the CLI on SIGINT) unwinds once the last
        writes' time is up, the store answering nothing; the cancellation propagates."""
        clock = FakeClock()
        tool = Waiting()
        ref = SessionRef(log, "ops", "tester", "stuck")
        ended: list[str] = []

        async def run() -> None:
            try:
                await run_autonomous(tool.build(ref), "watch", clock=clock)
            except anyio.get_cancelled_exc_class():
                ended.append("cancelled")
                raise

        with anyio.fail_after(SLACK):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await tool.entered.wait()
                log.stick()
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await log.stalled.wait()
                    clock.advance(LAST_WRITES)
        assert ["cancelled"] == ended

    async def test_a_store_that_answers_late_still_gets_the_checkpoint(self, log: StuckLog) -> None:
        """A store that answers again within the last writes' time gets the final checkpoint
        (the bound cuts a wait short only when the time is up), and the lease goes with it."""
        clock = FakeClock()
        with structlog.testing.capture_logs() as logs:
            async with self.stuck_mid_turn(log, clock) as handle:
                with anyio.fail_after(SLACK):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(handle.stop)
                        await log.stalled.wait()
                        clock.advance(LAST_WRITES / 2)
                        log.unstick()
        assert [] == missing_checkpoint_lines(logs)
        latest = await log.latest_checkpoint(SessionRef(log, "ops", "tester", "stuck").key)
        assert latest is not None and isinstance(latest.payload, Checkpoint)
        assert StopReason.CONTEXT_CANCELLED.value == latest.payload.stop_reason


@pytest.mark.postgres
class TestSessionRowLocked:
    """PostgreSQL, the session's row locked by another transaction: the run's renewals and
    writes all wait for it (the store's own timeout is 10 s)."""

    async def test_stop_returns_within_the_last_writes_time(
        self, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A stop while a lease renewal waits for the locked row returns within the last
        writes' time (made 1 s here) and a little, not when the lock goes: the renewal in
        flight, the final checkpoint and the release all end by then. The run is stopped,
        context_cancelled, and says its final checkpoint is missing."""
        limit = 1.0
        monkeypatch.setattr(run_module, "_FINAL_WRITE_TIMEOUT", limit)
        tool = Waiting()
        with structlog.testing.capture_logs() as logs:
            async with PostgresEventLog(pg_dsn) as log:
                ref = SessionRef(log, "ops", "tester", "locked")
                # Renewals every 0.2 s: one is waiting for the row when the stop comes.
                async with start_autonomous(tool.build(ref), "watch", lease_ttl=0.6) as handle:
                    await tool.entered.wait()
                    async with await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
                        await blocker.execute("SELECT sid FROM eventlog_sessions FOR UPDATE")
                        await wait_blocked_by(pg_dsn, blocker.info.backend_pid)
                        began = time.monotonic()
                        with anyio.fail_after(limit + SLACK):
                            await handle.stop()
                        took = time.monotonic() - began
                        await blocker.rollback()
                    result = await handle.wait()
        assert took < limit + SLACK
        assert (AutonomousStatus.STOPPED, StopReason.CONTEXT_CANCELLED) == (
            handle.status,
            result.reason,
        )
        assert 1 == len(missing_checkpoint_lines(logs))

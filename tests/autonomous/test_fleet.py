"""autonomous.fleet.Daemon: the daemon as a library object, run in the program's own event loop.

In-process on a SQLite log and a FakeClock moved by the tests: the daemon's polls, the runs'
schedules and the log's leases all read it, so nothing waits on real time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

import autonomous
from autonomous import Agent, ConfigurationError, StopReason, function_tool, run_autonomous
from autonomous.fleet import AdoptedLease, Daemon
from autonomous.testing import ScriptedModel, call, done, reply
from eventlog import SessionKey, SessionRef, SqliteEventLog
from scheduler import ExitOnDeferScheduler, FakeClock

pytestmark = pytest.mark.anyio

APP, USER = "fleet", "ops"


async def until(condition: Callable[[], bool]) -> None:
    """Wait (ten real seconds at most) until ``condition()`` holds; the daemon's tasks run
    between looks, its clock stands still."""
    for _ in range(1000):
        if condition():
            return
        await anyio.sleep(0.01)
    raise AssertionError("the condition never held")


def agent(log: SqliteEventLog, model: ScriptedModel, *tools: Any) -> Any:
    """A build function (``build(extra_tools, session_id)``) of agents on ``model``."""

    def build(extra: list[Any], session_id: str = "s1") -> Agent:
        ref = SessionRef(log, APP, USER, session_id)
        return Agent(model, instructions="watch", tools=[*tools, *extra], session=ref)

    return build


class Reports:
    """The daemon's report lines, kept: ``report(event, **fields)``."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    @property
    def events(self) -> list[str]:
        """The events reported so far, in order."""
        return [event for event, _ in self.lines]


async def deferred(log: SqliteEventLog, clock: FakeClock, wake_in: int, *tools: Any) -> None:
    """Session s1, run once: it defers for ``wake_in`` seconds of ``clock``."""
    model = ScriptedModel(
        [call("schedule_next_turn", {"wake_in_sec": wake_in}), reply("until then")]
    )
    options: dict[str, Any] = {"scheduler": ExitOnDeferScheduler(), "clock": clock}
    result = await run_autonomous(agent(log, model, *tools), "watch", **options)
    assert StopReason.DEFERRED == result.reason


class TestDaemonRuns:
    """``Daemon(log, build, ...)`` resumes the log's due sessions with ``build``."""

    async def test_resumes_a_deferred_session_when_it_is_due(self, tmp_path: Path) -> None:
        """A session deferred for a minute is resumed only once the clock gets within a poll
        of its wake, and completes."""
        clock = FakeClock()
        async with SqliteEventLog(tmp_path / "runs.db", clock=clock.now) as log:
            await deferred(log, clock, 60)
            reports = Reports()
            build = agent(log, ScriptedModel([done("all well")]))
            daemon = Daemon(log, build, poll=10, clock=clock, report=reports)
            async with anyio.create_task_group() as tg:
                tg.start_soon(daemon.run)
                await until(lambda: clock.sleepers == 1)  # polled at 0 s: not due within 10
                clock.advance(30)
                await until(lambda: clock.sleepers == 1)  # at 30 s: still not
                assert ["daemon_started"] == reports.events
                clock.advance(35)  # 65 s: due
                await until(lambda: "finished" in reports.events)
                daemon.stop()
            [summary] = await log.sessions()
        assert ["daemon_started", "resuming", "finished"] == reports.events
        assert ("completed", str(summary.key)) == (
            reports.lines[-1][1]["reason"],
            reports.lines[-1][1]["session"],
        )
        assert ("completed", None) == (summary.stop_reason, summary.holder)

    async def test_once_runs_what_is_due_then_returns(self, tmp_path: Path) -> None:
        """With ``once=True``, :meth:`Daemon.run` resumes what is due now and returns."""
        clock = FakeClock()
        async with SqliteEventLog(tmp_path / "runs.db", clock=clock.now) as log:
            await deferred(log, clock, 60)
            clock.advance(61)
            reports = Reports()
            build = agent(log, ScriptedModel([done("all well")]))
            with anyio.fail_after(10):
                await Daemon(log, build, once=True, clock=clock, report=reports).run()
        assert ["daemon_started", "resuming", "finished"] == reports.events


class TestDaemonStops:
    """``stop()`` and leaving ``async with``: the daemon's run ends, its sessions handed back."""

    async def test_stop_ends_run_and_hands_back_a_running_session(self, tmp_path: Path) -> None:
        """A daemon stopped while its session runs a tool returns from run(); the session is
        due again, on no lease, for the next daemon."""
        started = anyio.Event()

        async def wait_forever() -> str:
            """Wait for what never comes."""
            started.set()
            await anyio.sleep_forever()
            return "never"

        tool = function_tool(wait_forever)
        clock = FakeClock()
        key = SessionKey(APP, USER, "s1")
        async with SqliteEventLog(tmp_path / "runs.db", clock=clock.now) as log:
            await deferred(log, clock, 60, tool)
            clock.advance(61)
            reports = Reports()
            build = agent(log, ScriptedModel([call("wait_forever")]), tool)
            daemon = Daemon(log, build, poll=10, clock=clock, report=reports)
            async with anyio.create_task_group() as tg:
                tg.start_soon(daemon.run)
                with anyio.fail_after(10):
                    await started.wait()
                daemon.stop()
                daemon.stop()  # idempotent
            due = [s.key for s in await log.due_sessions(clock.now())]
            [summary] = await log.sessions()
        assert "handed_back" in reports.events
        assert [key] == due
        assert ("deferred", None) == (summary.stop_reason, summary.holder)

    async def test_leaving_async_with_stops_it(self, tmp_path: Path) -> None:
        """``async with daemon:`` runs it in the background; leaving the block stops it."""
        clock = FakeClock()
        reports = Reports()
        async with SqliteEventLog(tmp_path / "runs.db", clock=clock.now) as log:
            build = agent(log, ScriptedModel([]))
            with anyio.fail_after(10):
                async with Daemon(log, build, poll=10, clock=clock, report=reports) as daemon:
                    await until(lambda: clock.sleepers == 1)
                    assert daemon.running
            assert not daemon.running
        assert ["daemon_started"] == reports.events

    async def test_the_block_s_own_error_comes_out_as_itself(self, tmp_path: Path) -> None:
        """An error raised in the ``async with`` block is raised as it is, not wrapped in an
        exception group by the daemon's background task, and the daemon is stopped."""
        clock = FakeClock()
        async with SqliteEventLog(tmp_path / "runs.db", clock=clock.now) as log:
            daemon = Daemon(log, agent(log, ScriptedModel([])), poll=10, clock=clock)
            with anyio.fail_after(10), pytest.raises(KeyError, match="the block's"):
                async with daemon:
                    await until(lambda: clock.sleepers == 1)
                    raise KeyError("the block's")
            assert not daemon.running

    async def test_its_own_failure_is_raised_on_leaving_the_block(self, tmp_path: Path) -> None:
        """A daemon that fails in the background leaves the block running (not cancelled) and
        its error is raised, as itself, when the block ends."""

        class Broken(SqliteEventLog):
            def watch(self, key: SessionKey | None = None) -> Any:
                raise RuntimeError("the store broke")

        clock = FakeClock()
        async with Broken(tmp_path / "runs.db", clock=clock.now) as log:
            daemon = Daemon(log, agent(log, ScriptedModel([])), poll=10, clock=clock)
            with anyio.fail_after(10), pytest.raises(RuntimeError, match="the store broke"):
                async with daemon:
                    await anyio.wait_all_tasks_blocked()  # the daemon has begun, and failed
                    reached = not daemon.running
        assert reached

    async def test_stopped_before_it_runs_it_returns_at_once(self, tmp_path: Path) -> None:
        """stop() before run(): run() returns at once, having claimed and reported nothing."""
        clock = FakeClock()
        reports = Reports()
        async with SqliteEventLog(tmp_path / "runs.db", clock=clock.now) as log:
            await deferred(log, clock, 60)
            clock.advance(61)
            daemon = Daemon(log, agent(log, ScriptedModel([])), clock=clock, report=reports)
            daemon.stop()
            with anyio.fail_after(10):
                await daemon.run()
            due = [s.key for s in await log.due_sessions(clock.now())]
        assert ([], [SessionKey(APP, USER, "s1")]) == (reports.events, due)

    async def test_a_stopped_daemon_does_not_run_again(self, tmp_path: Path) -> None:
        """A daemon runs once: run() after it ended raises, naming the fix."""
        clock = FakeClock()
        async with SqliteEventLog(tmp_path / "runs.db", clock=clock.now) as log:
            daemon = Daemon(log, agent(log, ScriptedModel([])), once=True, clock=clock)
            await daemon.run()
            with pytest.raises(RuntimeError, match="runs once"):
                await daemon.run()


class TestDaemonRefuses:
    """Bad input is a ConfigurationError at once, naming what was wrong."""

    @pytest.mark.parametrize(
        ("given", "named"),
        [
            ({"poll": 0}, "poll"),
            ({"poll": timedelta(seconds=-1)}, "poll"),
            ({"lease_ttl": 0}, "lease_ttl"),
            ({"max_concurrent": 0}, "max_concurrent"),
            ({"max_concurrent": 1.5}, "max_concurrent"),
            ({"options": {"max_turnz": 3}}, "max_turnz"),
            ({"options": {"max_turns": -1}}, "max_turns"),
            ({"options": {"lease_ttl": 60}}, "lease_ttl"),
            ({"options": [("max_turns", 3)]}, "options"),
        ],
    )
    async def test_an_invalid_option(
        self, tmp_path: Path, given: dict[str, Any], named: str
    ) -> None:
        """An option out of range, or one no run takes, is refused by name."""
        async with SqliteEventLog(tmp_path / "runs.db") as log:
            with pytest.raises(ConfigurationError, match=named):
                Daemon(log, agent(log, ScriptedModel([])), **given)

    async def test_no_build_function(self, tmp_path: Path) -> None:
        """A Daemon needs a build function: None is refused, saying so."""
        async with SqliteEventLog(tmp_path / "runs.db") as log:
            with pytest.raises(ConfigurationError, match="build"):
                Daemon(log, None)  # type: ignore[arg-type]

    def test_not_an_event_log(self) -> None:
        """The log must be an eventlog store."""
        with pytest.raises(ConfigurationError, match="log"):
            Daemon("runs.db", agent(None, ScriptedModel([])))  # type: ignore[arg-type]


class TestAdoptedLease:
    """AdoptedLease is the fleet's, and still reachable where old programs found it."""

    def test_the_old_name_is_the_same_class(self) -> None:
        """``autonomous.AdoptedLease`` is ``autonomous.fleet.AdoptedLease``, not in __all__."""
        assert AdoptedLease is autonomous.AdoptedLease
        assert "AdoptedLease" not in autonomous.__all__

"""The daemon in-process, its polls on a fake clock: time moves only when the test says so."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from autonomous import run_autonomous
from autonomous._cli._common import record_spec
from autonomous._cli._daemon import Daemon
from autonomous.spec import load_spec
from eventlog import MemoryEventLog
from scheduler import FakeClock

from .conftest import write_spec


async def until(condition: Callable[[], bool]) -> None:
    """Wait (a real ten seconds at most) until ``condition()`` holds; the daemon's tasks run
    between looks, its clock stands still."""
    for _ in range(1000):
        if condition():
            return
        await anyio.sleep(0.01)
    raise AssertionError("the condition never held")


class TestDaemonClock:
    """``Daemon(clock=...)``."""

    @pytest.mark.anyio
    async def test_polls_on_its_clock(self, in_process: Path) -> None:
        """A session due in a minute of the clock is resumed only once the clock gets there."""
        spec = load_spec(
            write_spec(in_process, "later", "deferring", extra='[scheduler]\nkind = "exit"\n')
        )
        log = MemoryEventLog()
        ref = spec.session_ref(log, "c1")
        await record_spec(log, ref.key, spec, None)
        deferred = await run_autonomous(spec.build_function(ref), spec.goal, **spec.run_options())
        assert deferred.next_wake_at is not None
        clock = FakeClock(deferred.next_wake_at - timedelta(seconds=60))
        reports: list[tuple[str, dict[str, Any]]] = []
        daemon = Daemon(
            log,
            poll=10,
            once=False,
            crashed=False,
            report=lambda event, **fields: reports.append((event, fields)),
            clock=clock,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.serve)
            await until(lambda: clock.sleepers == 1)  # polled at -60 s: not due within a poll
            clock.advance(30)
            await until(lambda: clock.sleepers == 1)  # polled at -30 s: still not
            assert ["daemon_started"] == [event for event, _ in reports]
            clock.advance(25)  # -5 s: due within the next poll
            await until(lambda: "finished" in [event for event, _ in reports])
            tg.cancel_scope.cancel()
        assert ["daemon_started", "resuming", "finished"] == [event for event, _ in reports]
        assert "completed" == reports[-1][1]["reason"]

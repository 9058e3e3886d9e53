"""A run's SessionKeeper on a fleet's terms: a lease lent by a worker, and the store's watch.

The store here is an in-memory log made durable, with an in-process ``watch`` the tests see
notified on every inbox, control and checkpoint append (what PostgreSQL's LISTEN gives a run),
so the keeper is tested without a server, on a FakeClock that moves only when a test says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import pytest

from autonomous import (
    Agent,
    ConfigurationError,
    StopReason,
    resume_autonomous,
    run_autonomous,
    start_autonomous,
)
from autonomous._control._remote import send_control, send_inject
from autonomous.fleet import AdoptedLease
from autonomous.testing import FakeClock, ScriptedModel, call, done, reply
from eventlog import (
    EventKind,
    Lease,
    LeaseHolder,
    SessionKey,
    SessionRef,
)
from scheduler import ExitOnDeferScheduler, SleepScheduler

from ..support.watched_logs import WatchedLog
from .helpers import asleep

pytestmark = pytest.mark.anyio


def agent_on(model: ScriptedModel, ref: SessionRef) -> Any:
    """A rebuild function (``(extra, session_id) -> Agent``) for ``ref``."""

    def rebuild(extra: list[Any], session_id: str) -> Agent:
        assert session_id == ref.session_id
        return Agent(model, instructions="monitor", tools=extra, session=ref)

    return rebuild


def schedule(seconds: int) -> Any:
    """A schedule_next_turn call."""
    return call("schedule_next_turn", {"wake_in_sec": seconds, "next_prompt": "again"})


async def deferred_session(ref: SessionRef) -> None:
    """Run one turn on ``ref`` that defers (exits), so the session is there to resume."""
    model = ScriptedModel([schedule(60), reply("later")])
    result = await run_autonomous(
        lambda extra: Agent(model, tools=extra, session=ref),
        "watch the disk",
        scheduler=ExitOnDeferScheduler(),
    )
    assert StopReason.DEFERRED == result.reason


@pytest.fixture
def log() -> WatchedLog:
    """A fresh watched log."""
    return WatchedLog()


@pytest.fixture
def ref(log: WatchedLog) -> SessionRef:
    """A session on the watched log."""
    return SessionRef(log, "monitor", "ops", "disk-1")


class TestAdoptedLease:
    """``resume_autonomous(..., lease=AdoptedLease(lease))``: a run on a lease it was lent."""

    async def test_the_run_neither_acquires_renews_nor_releases_it(
        self, log: WatchedLog, ref: SessionRef
    ) -> None:
        """The run fences its appends with the lent lease (same epoch throughout) and leaves
        the lease with the lender, who renews and releases it."""
        await deferred_session(ref)
        worker = LeaseHolder.this_process()
        lease = await log.acquire_lease(ref.key, worker, 30)
        calls = dict(log.calls)
        clock = FakeClock()
        held = AdoptedLease(lease)
        model = ScriptedModel([reply("looked"), done(), reply("ok")])
        result = await resume_autonomous(
            agent_on(model, ref), ref, lease=held, clock=clock, lease_ttl=3
        )
        assert StopReason.COMPLETED == result.reason
        assert calls == log.calls, "the run took, renewed or dropped a lease of its own"
        holders = [s.holder for s in await log.sessions()]
        assert [str(worker)] == holders, "the lender's lease went with the run"
        await log.release_lease(held.lease)

    async def test_losing_it_stops_the_run_and_it_writes_nothing_more(
        self, log: WatchedLog, ref: SessionRef
    ) -> None:
        """``lose()`` (the lender's renewal left the session out) ends the run lease_lost,
        with no event written after it."""
        await deferred_session(ref)
        lease = await log.acquire_lease(ref.key, LeaseHolder.this_process(), 30)
        held = AdoptedLease(lease)
        clock = FakeClock()
        model = ScriptedModel(default=reply("working"))
        written: list[int] = []

        async def before(turn: int) -> None:
            """Each turn waits a minute of the clock (the lender acts meanwhile)."""
            await clock.sleep_until(clock.now() + timedelta(seconds=60))

        async def lend() -> Any:
            return await resume_autonomous(
                agent_on(model, ref), ref, lease=held, clock=clock, before_turn=before, max_turns=0
            )

        async with anyio.create_task_group() as tg:
            box: list[Any] = []

            async def run() -> None:
                box.append(await lend())

            tg.start_soon(run)
            await asleep(clock, 2)  # the poll tick and turn 1's minute: no renewal sleeps
            written.append(len(await log.read(ref.key)))
            held.lose()
        (result,) = box
        assert (StopReason.LEASE_LOST, True) == (result.reason, held.lost)
        assert written == [len(await log.read(ref.key))], "the run wrote after losing the lease"

    async def test_a_lease_of_another_session_is_refused(
        self, log: WatchedLog, ref: SessionRef
    ) -> None:
        """A lease whose session is not the resumed one is a ConfigurationError at once."""
        other = SessionKey("monitor", "ops", "other")
        lease = await log.acquire_lease(other, LeaseHolder.this_process(), 30)
        with pytest.raises(ConfigurationError, match="other"):
            await resume_autonomous(agent_on(ScriptedModel(), ref), ref, lease=AdoptedLease(lease))

    async def test_only_an_adopted_lease_is_taken(self, ref: SessionRef) -> None:
        """A bare Lease (or anything else) is refused, naming the type wanted."""
        with pytest.raises(ConfigurationError, match="AdoptedLease"):
            await resume_autonomous(agent_on(ScriptedModel(), ref), ref, lease=object())  # type: ignore[arg-type]


class TestWatch:
    """A store with ``watch``: the keeper wakes on its notifications, not only on its poll."""

    async def test_an_inject_reaches_a_live_run_without_the_poll_tick(
        self, log: WatchedLog, ref: SessionRef
    ) -> None:
        """A run asleep for ten minutes, polling hourly, wakes for an inject from elsewhere at
        once (the clock never moves) and shows it to the model."""
        clock = FakeClock()
        model = ScriptedModel([schedule(600), reply("zz"), done(), reply("ok")])
        async with start_autonomous(
            lambda extra: Agent(model, tools=extra, session=ref),
            "watch the disk",
            scheduler=SleepScheduler(clock=clock),
            control_poll=3600,
            lease_ttl=7200,
            clock=clock,
        ) as h:
            await asleep(clock, 3)  # the lease, the poll tick, the scheduler's sleep
            assert 1 == len([k for k, _ in log.watches if k == ref.key])
            await send_inject(log, ref.key, "from afar")
            with anyio.fail_after(5):
                result = await h.wait()
        assert StopReason.COMPLETED == result.reason
        assert any("from afar" in str(m["content"]) for m in model.last_messages)

    async def test_a_stop_reaches_it_too_and_the_watch_ends_with_the_run(
        self, log: WatchedLog, ref: SessionRef
    ) -> None:
        """A stop request ends the sleeping run at once; its watch is closed afterwards."""
        clock = FakeClock()
        model = ScriptedModel([schedule(600), reply("zz")])
        async with start_autonomous(
            lambda extra: Agent(model, tools=extra, session=ref),
            "watch the disk",
            scheduler=SleepScheduler(clock=clock),
            control_poll=3600,
            lease_ttl=7200,
            clock=clock,
        ) as h:
            await asleep(clock, 3)
            await send_control(log, ref.key, "stop")
            with anyio.fail_after(5):
                result = await h.wait()
        assert StopReason.CONTEXT_CANCELLED == result.reason
        assert [] == log.watches

    async def test_what_comes_right_after_the_first_read_wakes_the_watch(
        self, log: WatchedLog, ref: SessionRef
    ) -> None:
        """The watch begins before the run's first read (taking the lease), so an inject
        appended just after that read, before the run has started its tasks, wakes it: no
        gap between the read and the watch where it could be lost."""
        clock = FakeClock()
        model = ScriptedModel(default=told_then_done("slipped in"))
        acquire = log.acquire_lease

        async def then_inject(key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
            """Take the lease, then append an inject at once."""
            assert 1 == len([k for k, _ in log.watches if k == ref.key]), "no watch yet"
            lease = await acquire(key, holder, ttl)
            await send_inject(log, ref.key, "slipped in")
            return lease

        log.acquire_lease = then_inject  # type: ignore[method-assign]
        log.notifying = frozenset({EventKind.INBOX_QUEUED})  # the run's checkpoints wake nothing
        async with start_autonomous(
            lambda extra: Agent(model, tools=extra, session=ref),
            "watch the disk",
            scheduler=SleepScheduler(clock=clock),
            control_poll=3600,
            lease_ttl=7200,
            clock=clock,
        ) as h:
            with anyio.fail_after(5):
                result = await h.wait()
        assert StopReason.COMPLETED == result.reason
        assert any("slipped in" in str(m["content"]) for m in model.last_messages)


def told_then_done(text: str) -> Any:
    """A model step: sleep ten minutes until ``text`` is in the conversation, then finish."""

    def brain(messages: Sequence[dict[str, Any]], tools: Any) -> Any:
        told = any(text in str(m.get("content")) for m in messages)
        if messages[-1].get("role") == "tool":
            return reply("ok" if told else "zz")
        return done() if told else schedule(600)

    return brain


class TestOnAnAutojumpingClock:
    """A durable run (lease renewal, control poll, the store's watch) on
    ``FakeClock(autojump=True)``: time moves only when the whole run waits on it."""

    async def test_renewals_do_not_push_time_ahead_of_the_runs_work(
        self, log: WatchedLog, ref: SessionRef
    ) -> None:
        """A run that sleeps ten minutes, renewing its lease every 10 s and polling every
        minute meanwhile, wakes at the ten minutes of its schedule and completes, well within
        its wall-clock budget: the renewals jump time only while everything waits."""
        clock = FakeClock(autojump=True)
        model = ScriptedModel([schedule(600), reply("zz"), done(), reply("ok")])
        with anyio.fail_after(10):
            result = await run_autonomous(
                lambda extra: Agent(model, tools=extra, session=ref),
                "watch the disk",
                scheduler=SleepScheduler(clock=clock),
                control_poll=60,
                lease_ttl=30,
                clock=clock,
                max_wallclock=900,
            )
        assert (StopReason.COMPLETED, 600.0) == (result.reason, clock.monotonic())

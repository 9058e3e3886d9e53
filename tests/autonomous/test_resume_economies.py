"""Specification of a resume's trips to the store: each read once, the watch begun before the
first read, a lent lease released with the final checkpoint when its lender allows it.

A daemon resumes thousands of sessions a minute; each trip to a shared store costs CPU on
both sides, so what a resume reads and writes is part of its contract.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

import anyio
import pytest

from autonomous import Agent, StopReason, resume_autonomous
from autonomous._control._remote import send_inject
from autonomous.fleet import AdoptedLease
from autonomous.testing import FakeClock, ScriptedModel, done, reply
from eventlog import Event, EventKind, Lease, LeaseHolder, SessionKey, SessionRef

from ..support.watched_logs import FakeWatch, WatchedLog
from .test_keeper_watch import agent_on, deferred_session

pytestmark = pytest.mark.anyio

#: The kinds a run's log watch reads.
WATCH_KINDS = frozenset({EventKind.INBOX_QUEUED, EventKind.CONTROL})


class TripLog(WatchedLog):
    """A WatchedLog that writes down, in order, each read and each watch it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.trips: list[str] = []
        self.counts: Counter[str] = Counter()
        self._with_append = False
        self.watch_read = anyio.Event()  # set by the first read of the watch's kinds

    def _trip(self, name: str) -> None:
        self.trips.append(name)
        self.counts[name] += 1

    @contextlib.asynccontextmanager
    async def watch(self, key: SessionKey | None = None) -> AsyncIterator[FakeWatch]:
        """Write down the watch's start, then watch."""
        self._trip("watch")
        async with super().watch(key) as watch:
            yield watch

    async def latest_checkpoint(self, key: SessionKey) -> Event | None:
        """Count, then read."""
        self._trip("latest_checkpoint")
        return await super().latest_checkpoint(key)

    async def read(
        self,
        key: SessionKey,
        *,
        after_seq: int = 0,
        kinds: Collection[EventKind] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Write down a read of the watch's kinds apart from the others, then read."""
        watching = kinds is not None and frozenset(kinds) == WATCH_KINDS
        self._trip("watch_read" if watching else "read")
        if watching:
            self.watch_read.set()
        return await super().read(key, after_seq=after_seq, kinds=kinds, limit=limit)

    async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
        """Count, then append and release (the release inside is not counted apart)."""
        self.counts["append_and_release"] += 1
        self._with_append = True
        try:
            seqs = await super().append_and_release(events, lease)
        finally:
            self._with_append = False
        self.trips.append("last_write")
        await anyio.wait_all_tasks_blocked()  # what the checkpoint's notification wakes, runs
        return seqs
        self.watch_read = anyio.Event()  # set by the first read of the watch's kinds

    async def release_lease(self, lease: Lease) -> None:
        """Count a release of its own, then release."""
        if not self._with_append:
            self.counts["release_lease"] += 1
        await super().release_lease(lease)


@pytest.fixture
def log() -> TripLog:
    """A fresh log that notes its trips."""
    return TripLog()


@pytest.fixture
def ref(log: TripLog) -> SessionRef:
    """A session on the log."""
    return SessionRef(log, "monitor", "ops", "disk-1")


class TestResumeReads:
    async def test_the_latest_checkpoint_is_read_once(self, log: TripLog, ref: SessionRef) -> None:
        """Deciding whether the session finished and restoring it share one read of its
        latest checkpoint (it cannot change under the run's lease)."""
        await deferred_session(ref)
        log.counts.clear()
        model = ScriptedModel([done(), reply("ok")])
        result = await resume_autonomous(agent_on(model, ref), ref, clock=FakeClock())
        assert StopReason.COMPLETED == result.reason
        assert 1 == log.counts["latest_checkpoint"]

    async def test_the_watch_begins_before_the_first_read_and_reads_only_when_told(
        self, log: TripLog, ref: SessionRef
    ) -> None:
        """The run's watch starts before the resume reads the session, so it has no gap of
        its own to read: mid-turn (the poll an hour away, the clock standing) it has read
        nothing; an inject from elsewhere then wakes it and reaches the model."""
        await deferred_session(ref)
        log.trips.clear()
        clock = FakeClock()
        turning, told = anyio.Event(), anyio.Event()

        async def first_turn(messages: Any, tools: Any) -> Any:
            """Hold the turn until the test has looked and injected."""
            turning.set()
            await told.wait()
            return reply("looked")

        def later(messages: Sequence[dict[str, Any]], tools: Any) -> Any:
            """Finish once the inject is in the conversation."""
            if any("from afar" in str(m.get("content")) for m in messages):
                return done() if messages[-1].get("role") != "tool" else reply("ok")
            return reply("waiting")

        model = ScriptedModel([first_turn], default=later)
        async with anyio.create_task_group() as tg:
            box: list[Any] = []

            async def run() -> None:
                box.append(
                    await resume_autonomous(
                        agent_on(model, ref),
                        ref,
                        clock=clock,
                        control_poll=3600,
                        lease_ttl=7200,
                        max_turns=0,
                    )
                )

            tg.start_soon(run)
            with anyio.fail_after(5):
                await turning.wait()
            reads = [t for t in log.trips if t != "watch"]
            assert ("watch", []) == (log.trips[0], [t for t in reads if t == "watch_read"])
            await send_inject(log, ref.key, "from afar")
            with anyio.fail_after(5):
                await log.watch_read.wait()
            told.set()
        (result,) = box
        assert StopReason.COMPLETED == result.reason
        assert any("from afar" in str(m["content"]) for m in model.last_messages)

    async def test_the_watch_reads_nothing_after_the_runs_last_write(
        self, log: TripLog, ref: SessionRef
    ) -> None:
        """The final checkpoint notifies the run's own watch; the run has nothing left to
        obey, so the watch reads nothing for it."""
        await deferred_session(ref)
        log.trips.clear()
        model = ScriptedModel([done(), reply("ok")])
        result = await resume_autonomous(agent_on(model, ref), ref, clock=FakeClock())
        assert StopReason.COMPLETED == result.reason
        assert "last_write" in log.trips
        assert [] == log.trips[log.trips.index("last_write") + 1 :]


class TestLentLeaseReleasedAtEnd:
    async def test_the_final_checkpoint_takes_a_lease_lent_so(
        self, log: TripLog, ref: SessionRef
    ) -> None:
        """Lent with ``release_at_end``, the lease goes with the run's final checkpoint in
        one store call; the lender is told, and has nothing left to release."""
        await deferred_session(ref)
        lease = await log.acquire_lease(ref.key, LeaseHolder.this_process(), 30)
        lent = AdoptedLease(lease, release_at_end=True)
        log.counts.clear()
        model = ScriptedModel([done(), reply("ok")])
        result = await resume_autonomous(agent_on(model, ref), ref, lease=lent, clock=FakeClock())
        assert StopReason.COMPLETED == result.reason
        assert (1, 0, True) == (
            log.counts["append_and_release"],
            log.counts["release_lease"],
            lent.released,
        )
        assert [None] == [s.holder for s in await log.sessions()]

    async def test_a_run_its_caller_cancels_leaves_the_lease_with_the_lender(
        self, log: TripLog, ref: SessionRef
    ) -> None:
        """Cancelled by its caller (a daemon shutting down), the run writes its final
        checkpoint on the lease and leaves it held: the lender still writes on it."""
        await deferred_session(ref)
        worker = LeaseHolder.this_process()
        lease = await log.acquire_lease(ref.key, worker, 30)
        lent = AdoptedLease(lease, release_at_end=True)
        log.counts.clear()
        turning = anyio.Event()

        async def stall(messages: Any, tools: Any) -> Any:
            turning.set()
            await anyio.sleep_forever()

        model = ScriptedModel([stall])

        def rebuild(extra: list[Any], session_id: str) -> Agent:
            return Agent(model, tools=extra, session=ref)

        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: resume_autonomous(rebuild, ref, lease=lent, clock=FakeClock()))
            with anyio.fail_after(5):
                await turning.wait()
            tg.cancel_scope.cancel()
        latest = await log.latest_checkpoint(ref.key)
        assert latest is not None and "context_cancelled" == latest.payload.stop_reason  # type: ignore[union-attr]
        assert (False, 0) == (lent.released, log.counts["append_and_release"])
        assert [str(worker)] == [s.holder for s in await log.sessions()]
        await log.release_lease(lent.lease)

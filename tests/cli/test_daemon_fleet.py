"""The daemon in-process as a fleet member, on a store that counts its lease calls and a
FakeClock: claims, one batched heartbeat, releases, the store's watch, refusals."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest

from autonomous import run_autonomous
from autonomous._cli._common import SPEC_NOTE, adopt_spec, record_spec
from autonomous._cli._daemon import Daemon
from autonomous._control._remote import send_control, send_inject
from autonomous.spec import load_spec
from eventlog import (
    SCHEMA_VERSION,
    Checkpoint,
    Claim,
    Clock,
    Event,
    EventKind,
    Lease,
    LeaseHolder,
    MemoryEventLog,
    Note,
    SessionKey,
    SqliteEventLog,
    StoreUnavailable,
    UserMessage,
)
from scheduler import FakeClock

from ..support.watched_logs import LeaseCountingLog, WatchedLog
from .conftest import write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'


class FleetLog(LeaseCountingLog):
    """An in-memory log on the test's clock that counts the lease calls the daemon makes;
    ``renew_fails`` makes every batched renewal fail, ``claim_fails`` every claim (a store
    that is down for a while), ``fenced_fails`` the next few appends of the runs."""

    def __init__(self, *, clock: Clock) -> None:
        super().__init__(clock=clock)
        self.batches: list[int] = []  # the size of each renew_leases call
        self.renew_fails = False
        self.claim_fails = False
        self.fenced_fails: list[StoreUnavailable] = []  # raised by the next fenced appends

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Append, unless ``fenced_fails`` has an error for this fenced append (a run's)."""
        if lease is not None and self.fenced_fails:
            raise self.fenced_fails.pop(0)
        return await super().append(events, lease=lease)

    async def renew_leases(self, leases: Sequence[Lease], ttl: float) -> list[Lease]:
        """Record the batch, then renew it (or fail, with ``renew_fails``)."""
        self.batches.append(len(leases))
        if self.renew_fails:
            raise StoreUnavailable("the test's store is down")
        return await super().renew_leases(leases, ttl)

    async def claim_due(
        self,
        now: datetime,
        holder: LeaseHolder,
        ttl: float,
        *,
        limit: int,
        interrupted: bool = False,
    ) -> list[Claim]:
        """Count, then claim (or fail, with ``claim_fails``)."""
        self.calls["claim_due"] += 1
        if self.claim_fails:
            raise StoreUnavailable("the test's store is down")
        return await super().claim_due(now, holder, ttl, limit=limit, interrupted=interrupted)


class WatchedFleetLog(WatchedLog, FleetLog):
    """A FleetLog with ``watch``: every inbox, control or checkpoint append, every lease
    release and every claim wakes the watches of its session (as PostgresEventLog's do)."""


async def standing(count: Callable[[], int]) -> int:
    """``count()`` once it has stood still for 200 checkpoints, in which the daemon's tasks get
    every chance to move it; fails when it never stands still."""
    for _ in range(50):
        before = count()
        for _ in range(200):
            await anyio.lowlevel.checkpoint()
        if count() == before:
            return before
    raise AssertionError(f"the count never stood still (at {count()})")


async def until(condition: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (ten real seconds at most) until ``condition()`` holds; the runs and the daemon
    go on between looks, the daemon's clock stands still."""
    for _ in range(1000):
        value = condition()
        if await value if inspect.isawaitable(value) else value:
            return
        await anyio.sleep(0.01)
    raise AssertionError("the condition never held")


@attrs.define
class Fleet:
    """One in-process daemon on a FleetLog and a FakeClock, and what it reported."""

    log: Any  # a FleetLog (a WatchedFleetLog), or a SqliteEventLog
    clock: FakeClock
    daemon: Daemon
    reports: list[tuple[str, dict[str, Any]]]

    def events(self, name: str) -> list[dict[str, Any]]:
        """The fields of every ``name`` report so far."""
        return [fields for event, fields in self.reports if event == name]

    async def turns(self, session_id: str) -> list[int]:
        """The turns of a session's user messages."""
        key = SessionKey("tests", "tester", session_id)
        return [
            e.payload.turn
            for e in await self.log.read(key, kinds=[EventKind.USER_MESSAGE])
            if isinstance(e.payload, UserMessage)
        ]


async def deferred_fleet(
    agent_dir: Path,
    ids: Sequence[str],
    *,
    watched: bool = False,
    poll: float = 10,
    sqlite: Path | None = None,
) -> Fleet:
    """Sessions of the spec ``later`` (deferring, then looping until an inbox message), each
    deferred once, and a daemon (not started) whose clock is past their wake times; on a
    FleetLog, or on a SQLite file (the caller closes it)."""
    spec = load_spec(write_spec(agent_dir, "later", "deferring_then_looping", extra=DEFERRING))
    clock = FakeClock()
    log: Any
    if sqlite is not None:
        log = SqliteEventLog(sqlite, clock=clock.now)
    else:
        log = (WatchedFleetLog if watched else FleetLog)(clock=clock.now)
    wake = clock.now()
    for session_id in ids:
        ref = spec.session_ref(log, session_id)
        await record_spec(log, ref.key, spec, None)
        result = await run_autonomous(spec.build_function(ref), spec.goal, **spec.run_options())
        assert result.next_wake_at is not None
        wake = max(wake, result.next_wake_at)
    if sqlite is None:
        log.calls.clear()  # the set-up's runs took leases; the tests count the daemon's
    clock.advance((wake - clock.now()).total_seconds() + 1)
    reports: list[tuple[str, dict[str, Any]]] = []
    daemon = Daemon(
        log,
        poll=poll,
        once=False,
        crashed=False,
        report=lambda event, **fields: reports.append((event, fields)),
        clock=clock,
        lease_ttl=30,
    )
    return Fleet(log, clock, daemon, reports)


def key_of(session_id: str) -> SessionKey:
    """The key of a session of the tests' spec."""
    return SessionKey("tests", "tester", session_id)


class TestDaemonClaims:
    """The daemon as a fleet member: claims with leases, one batched heartbeat, release."""

    @pytest.mark.anyio
    async def test_runs_adopt_their_claims_and_one_call_renews_them_all(
        self, in_process: Path
    ) -> None:
        """Two claimed sessions run on their claims (no acquire, no renewal of their own);
        a third of the TTL later one renew_leases call renews both; each lease is released
        when its run ends."""
        fleet = await deferred_fleet(in_process, ["r1", "r2"])
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: _async_len_at_least(fleet.turns("r1"), 3))
            await until(lambda: _async_len_at_least(fleet.turns("r2"), 3))
            assert [] == fleet.log.batches
            fleet.clock.advance(10)  # a third of 30 s: the heartbeat
            await until(lambda: fleet.log.batches == [2])
            for sid in ("r1", "r2"):
                await send_inject(fleet.log, key_of(sid), "finish now")
            await until(lambda: len(fleet.events("finished")) == 2)
            tg.cancel_scope.cancel()
        assert {"completed"} == {f["reason"] for f in fleet.events("finished")}
        assert (0, 0) == (fleet.log.calls["acquire_lease"], fleet.log.calls["renew_lease"])
        assert [None, None] == [s.holder for s in await fleet.log.sessions()]

    @pytest.mark.anyio
    async def test_a_lease_the_renewal_leaves_out_stops_its_run_writing_nothing_more(
        self, in_process: Path
    ) -> None:
        """The store is down past the lease's expiry, another worker takes the idle (paused)
        session over; the next renewal leaves it out and the run stops as lease_lost, with
        no event written after the takeover."""
        fleet = await deferred_fleet(in_process, ["t1"])
        key = key_of("t1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: _async_len_at_least(fleet.turns("t1"), 3))
            await send_control(fleet.log, key, "pause")
            await until(lambda: _latest_paused(fleet.log, key))
            fleet.log.renew_fails = True
            fleet.clock.advance(31)  # one renewal fails; the lease is past its expiry
            await until(lambda: len(fleet.log.batches) == 1)
            other = await fleet.log.acquire_lease(key, LeaseHolder.this_process(), 30)
            written = len(await fleet.log.read(key))
            fleet.log.renew_fails = False
            fleet.clock.advance(10)
            await until(lambda: bool(fleet.events("finished")))
            tg.cancel_scope.cancel()
        assert ["lease_lost"] == [f["reason"] for f in fleet.events("finished")]
        assert written == len(await fleet.log.read(key)), "the run wrote after the takeover"
        assert [str(other.holder)] == [s.holder for s in await fleet.log.sessions()]

    @pytest.mark.anyio
    async def test_a_store_down_for_some_polls_is_reported_once_and_tried_again(
        self, in_process: Path
    ) -> None:
        """The claims fail for three polls (the store restarting): the daemon says so once,
        goes on polling, says when the store answers again, and runs what is due."""
        fleet = await deferred_fleet(in_process, ["s1"])
        fleet.log.claim_fails = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            for polls in (1, 2, 3):
                await until(lambda: fleet.log.calls["claim_due"] == polls)  # noqa: B023
                fleet.clock.advance(10)
            fleet.log.claim_fails = False
            await until(lambda: _async_len_at_least(fleet.turns("s1"), 3))
            tg.cancel_scope.cancel()
        events = [event for event, _ in fleet.reports]
        assert (1, 1) == (events.count("store_unavailable"), events.count("store_available"))
        assert events.index("store_unavailable") < events.index("store_available")
        assert "the test's store is down" in fleet.events("store_unavailable")[0]["error"]
        assert events.index("store_available") < events.index("resuming")

    @pytest.mark.anyio
    async def test_with_once_a_store_down_ends_the_pass(self, in_process: Path) -> None:
        """``--once`` is one pass: a store that does not answer ends it with the error."""
        fleet = await deferred_fleet(in_process, ["s2"])
        fleet.log.claim_fails = True
        fleet.daemon._once = True
        with pytest.raises(BaseExceptionGroup) as caught:  # from inside its task groups
            await fleet.daemon.serve()
        assert caught.group_contains(StoreUnavailable, match="the test's store is down")
        assert [] == fleet.events("store_unavailable")

    @pytest.mark.anyio
    async def test_a_shutdown_hands_back_and_releases_at_once(self, in_process: Path) -> None:
        """Cancelled, the daemon hands its running session back as due and lets its lease
        go: another worker may claim it at once, not after the lease's expiry."""
        fleet = await deferred_fleet(in_process, ["h1"])
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: _async_len_at_least(fleet.turns("h1"), 3))
            tg.cancel_scope.cancel()
        assert 1 == len(fleet.events("handed_back"))
        (summary,) = await fleet.log.sessions()
        assert (None, "deferred") == (summary.holder, summary.stop_reason)
        claims = await fleet.log.claim_due(
            fleet.clock.now(), LeaseHolder.this_process(), 30, limit=5
        )
        assert [key_of("h1")] == [c.summary.key for c in claims]


class TestDaemonWatch:
    """A store with ``watch``: the daemon's wait for due sessions ends on its notifications."""

    @pytest.mark.anyio
    async def test_an_unpause_reaches_a_daemon_between_polls(self, in_process: Path) -> None:
        """A due session paused while the daemon waits an hour between polls is resumed as
        soon as it is unpaused, the clock not moving."""
        fleet = await deferred_fleet(in_process, ["w1"], watched=True, poll=3600)
        key = key_of("w1")
        await send_control(fleet.log, key, "pause")
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: bool(fleet.events("paused")))
            await until(lambda: fleet.clock.sleepers == 1)  # the poll; nothing is held
            await send_control(fleet.log, key, "resume")
            await until(lambda: bool(fleet.events("resuming")))
            await until(lambda: _async_len_at_least(fleet.turns("w1"), 3))
            await send_inject(fleet.log, key, "finish now")
            await until(lambda: bool(fleet.events("finished")))
            tg.cancel_scope.cancel()
        assert ["completed"] == [f["reason"] for f in fleet.events("finished")]


async def _async_len_at_least(turns: Awaitable[list[int]], n: int) -> bool:
    """Whether the awaited list has at least ``n`` items."""
    return len(await turns) >= n


async def _latest_paused(log: MemoryEventLog, key: SessionKey) -> bool:
    """Whether the session's latest checkpoint says the run is parked by a pause."""
    latest = await log.latest_checkpoint(key)
    return latest is not None and isinstance(latest.payload, Checkpoint) and latest.payload.paused


def spec_data(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The data of each spec note among ``events``."""
    return [
        dict(e.payload.data)
        for e in events
        if isinstance(e.payload, Note) and e.payload.text == SPEC_NOTE
    ]


class TestSpecIdentity:
    """Checkpoints and the spec note record what ran; a worker that cannot run a session
    (another spec, a newer schema) says so once and leaves it."""

    @pytest.mark.anyio
    async def test_the_note_and_every_checkpoint_record_the_spec_digest(
        self, in_process: Path
    ) -> None:
        """The spec note holds the file's SHA-256, and each checkpoint of the run the same."""
        fleet = await deferred_fleet(in_process, ["i1"])
        digest = "sha256:" + hashlib.sha256((in_process / "later.toml").read_bytes()).hexdigest()
        events = await fleet.log.read(key_of("i1"))
        assert [digest] == [d["digest"] for d in spec_data(events)]
        versions = {e.payload.agent_version for e in events if isinstance(e.payload, Checkpoint)}
        assert {digest} == versions

    @pytest.mark.anyio
    async def test_a_worker_whose_spec_differs_refuses_once_and_leaves_it(
        self, in_process: Path
    ) -> None:
        """The spec file here is not the one the session recorded: one failed report naming
        the session and why, no turn, the lease released at once for another worker."""
        fleet = await deferred_fleet(in_process, ["i2"])
        spec = in_process / "later.toml"
        spec.write_text(spec.read_text().replace("You are a test agent.", "You are another."))
        before = len(await fleet.log.read(key_of("i2")))
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: bool(fleet.events("failed")))
            fleet.clock.advance(10)  # another poll: the failure is not reported again
            await until(lambda: fleet.log.calls["claim_due"] >= 2)
            tg.cancel_scope.cancel()
        (failed,) = fleet.events("failed")
        assert "tests/tester/i2" == failed["session"]
        assert "differs" in failed["error"] and "--spec" in failed["error"], failed["error"]
        assert before == len(await fleet.log.read(key_of("i2")))
        assert [None] == [s.holder for s in await fleet.log.sessions()]

    @pytest.mark.anyio
    async def test_a_spec_adopted_for_a_refused_session_runs_it_at_the_next_poll(
        self, in_process: Path
    ) -> None:
        """A session refused for an edited spec, then adopted (``autonomous adopt``, which
        writes no checkpoint): the running daemon tries it again at its next poll, and runs
        it to its end."""
        fleet = await deferred_fleet(in_process, ["i5"])
        key = key_of("i5")
        spec = in_process / "later.toml"
        spec.write_text(spec.read_text().replace("You are a test agent.", "You are another."))
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: bool(fleet.events("failed")))
            await adopt_spec(fleet.log, key, str(spec))
            fleet.clock.advance(10)  # the next poll
            await until(lambda: _async_len_at_least(fleet.turns("i5"), 3))
            await send_inject(fleet.log, key, "finish now")
            await until(lambda: bool(fleet.events("finished")))
            tg.cancel_scope.cancel()
        assert "autonomous adopt --spec" in fleet.events("failed")[0]["error"]
        assert 1 == len(fleet.events("failed"))
        assert ["completed"] == [f["reason"] for f in fleet.events("finished")]

    @pytest.mark.anyio
    async def test_a_session_of_a_newer_schema_is_refused_once_and_left(
        self, in_process: Path
    ) -> None:
        """An event written by a newer schema: one failed report naming the session and the
        schema, nothing written, the lease let go."""
        fleet = await deferred_fleet(in_process, ["i3"], sqlite=in_process / "runs.db")
        key = key_of("i3")
        async with fleet.log:
            await self._refused_as_newer(fleet, key)

    async def _refused_as_newer(self, fleet: Fleet, key: SessionKey) -> None:
        newer = Event.create(key, Note("from the future", {}), author="v2 worker")
        await fleet.log.append([attrs.evolve(newer, v=SCHEMA_VERSION + 1)])
        before = await fleet.log.count(key)
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: bool(fleet.events("failed")))
            tg.cancel_scope.cancel()
        (failed,) = fleet.events("failed")
        assert "tests/tester/i3" == failed["session"]
        assert "newer event schema" in failed["error"], failed["error"]
        assert before == await fleet.log.count(key)
        assert [None] == [s.holder for s in await fleet.log.sessions()]

    @pytest.mark.anyio
    async def test_a_run_the_store_failed_for_a_moment_is_tried_again_later_and_later(
        self, in_process: Path
    ) -> None:
        """A run fails twice on a store that lost its connection: each failure is reported
        with when the session is tried again, a poll later, then twice that; then it runs."""
        fleet = await deferred_fleet(in_process, ["b1"])
        lost = StoreUnavailable("connection lost", transient=True)
        fleet.log.fenced_fails = [lost, lost]
        resumed = lambda: len(fleet.events("resuming"))  # noqa: E731
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: len(fleet.events("failed")) == 1)
            assert 1 == await standing(resumed)  # not before a poll has passed
            fleet.clock.advance(10)
            await until(lambda: len(fleet.events("failed")) == 2)
            fleet.clock.advance(10)
            assert 2 == await standing(resumed)  # backing off: 20 s this time
            fleet.clock.advance(10)
            await until(lambda: _async_len_at_least(fleet.turns("b1"), 3))
            tg.cancel_scope.cancel()
        assert [10, 20] == [f["retry_in"] for f in fleet.events("failed")]
        assert all("connection lost" in f["error"] for f in fleet.events("failed"))

    @pytest.mark.anyio
    async def test_a_store_failing_the_first_read_of_a_resume_is_reported_as_such(
        self, in_process: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The store fails the resume's first read (its newest note) for a moment: the
        failure reported is the store's, tried again a poll later, and the session runs."""
        fleet = await deferred_fleet(in_process, ["b3"])
        lost = [StoreUnavailable("connection lost", transient=True)]
        read_last = fleet.log.read_last

        async def failing_once(key: SessionKey, kinds: Any, limit: int) -> list[Event]:
            if lost and EventKind.NOTE in kinds:
                raise lost.pop()
            return list(await read_last(key, kinds, limit))

        monkeypatch.setattr(fleet.log, "read_last", failing_once)
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: len(fleet.events("failed")) == 1)
            fleet.clock.advance(10)
            await until(lambda: _async_len_at_least(fleet.turns("b3"), 3))
            tg.cancel_scope.cancel()
        ((failed),) = fleet.events("failed")
        assert ("connection lost", 10) == (failed["error"].split(": ")[-1], failed["retry_in"])

    @pytest.mark.anyio
    async def test_a_run_the_store_refused_is_not_tried_again(self, in_process: Path) -> None:
        """A failure that is not the store's for a moment (one only an operator can mend) is
        reported once, without a retry, and the session left alone here."""
        fleet = await deferred_fleet(in_process, ["b2"])
        fleet.log.fenced_fails = [StoreUnavailable("event log x is read-only")]
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: bool(fleet.events("failed")))
            for _ in range(3):
                fleet.clock.advance(10)
                await standing(lambda: fleet.log.calls["claim_due"])
            tg.cancel_scope.cancel()
        ((failed),) = fleet.events("failed")
        assert ("read-only" in failed["error"], "retry_in" in failed) == (True, False)
        assert 1 == len(fleet.events("resuming"))

    @pytest.mark.anyio
    async def test_a_refused_session_is_not_claimed_again_at_each_notification(
        self, in_process: Path
    ) -> None:
        """Letting a refused session go notifies the store's watchers, the daemon too: that
        wake must not make it claim the session again and again until the next poll."""
        fleet = await deferred_fleet(in_process, ["i4"], watched=True, poll=3600)
        spec = in_process / "later.toml"
        spec.write_text(spec.read_text().replace("You are a test agent.", "You are another."))
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: bool(fleet.events("failed")))
            await until(lambda: fleet.clock.sleepers == 2)  # the poll, and the next beat
            # The release's notification may still be on its way when the daemon sleeps: one
            # more claim then is right; claiming at every notification never stands still.
            claims = await standing(lambda: fleet.log.calls["claim_due"])
            tg.cancel_scope.cancel()
        assert claims <= 3  # the first; the freed slot's wake; the release's notification
        assert 1 == len(fleet.events("failed"))

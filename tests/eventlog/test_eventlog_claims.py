"""claim_due and renew_leases: what every store (memory, SQLite, Postgres) must honour."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from eventlog import (
    Checkpoint,
    Claim,
    Control,
    Event,
    EventLog,
    LeaseHolder,
    LeaseLost,
    PostgresEventLog,
    SessionKey,
    SessionLocked,
    SqliteEventLog,
    UserMessage,
    _process,
)
from tests.eventlog.conftest import FakeClock
from tests.eventlog.helpers import add_fenced

pytestmark = pytest.mark.anyio

A = SessionKey("app", "ops", "a")
B = SessionKey("app", "ops", "b")
C = SessionKey("app", "ops", "c")
D = SessionKey("app", "ops", "d")
E = SessionKey("app", "ops", "e")
F = SessionKey("app", "ops", "f")
G = SessionKey("app", "ops", "g")
H = SessionKey("app", "ops", "h")

TTL = 30.0


def checkpoint(key: SessionKey, turns: int = 1, at: datetime | None = None, **fields: Any) -> Event:
    return Event.create(key, Checkpoint(turns, 10, 5, 0.25, "continue", **fields), at=at)


def user(key: SessionKey, text: str = "hello") -> Event:
    return Event.create(key, UserMessage(text, 1))


def deferred(key: SessionKey, wake: datetime, **fields: Any) -> Event:
    """A checkpoint that sleeps until ``wake``."""
    return checkpoint(key, stop_reason="deferred", next_wake_at=wake, **fields)


def crashed(key: SessionKey, at: datetime) -> Event:
    """The latest checkpoint of a run that died mid-way: no stop reason."""
    return checkpoint(key, at=at)


def holder(name: str, host: str = "elsewhere", pid: int = 4242) -> LeaseHolder:
    return LeaseHolder(host=host, pid=pid, token=name)


def keys(claims: list[Claim]) -> list[SessionKey]:
    return [claim.summary.key for claim in claims]


async def claim(
    log: EventLog,
    clock: FakeClock,
    who: LeaseHolder,
    *,
    limit: int = 100,
    interrupted: bool = False,
) -> list[Claim]:
    """``who`` claims what is due at the clock's time."""
    return await log.claim_due(clock.now, who, TTL, limit=limit, interrupted=interrupted)


class TestClaimDue:
    """claim_due: the due sessions nobody holds, taken with their lease in one step."""

    async def test_claims_due_sessions_earliest_wake_first(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """Every due session, the earliest wake first (one waking right now included), each
        with the claimer's new lease until now + ttl."""
        now = clock.now
        await store.append(
            [
                deferred(A, now - timedelta(minutes=5)),
                deferred(B, now - timedelta(minutes=9)),
                deferred(C, now),
            ]
        )
        me = holder("me")
        claims = await claim(store, clock, me)
        assert [B, A, C] == keys(claims)
        for got in claims:
            assert (got.summary.key, me) == (got.lease.key, got.lease.holder)
            assert now + timedelta(seconds=TTL) == got.lease.expires_at
            assert 0 < got.lease.epoch

    async def test_the_summary_is_the_session_as_claimed(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """A claim's summary is the session's summary, held by the claimer, without the
        checkpoint itself (sessions() alone reads it)."""
        await store.append([user(A), deferred(A, clock.now - timedelta(minutes=1), turns=3)])
        me = holder("me")
        (got,) = await claim(store, clock, me)
        (listed,) = await store.sessions()
        assert attrs.evolve(listed, checkpoint=None) == got.summary
        assert (str(me), 3, "deferred") == (
            got.summary.holder,
            got.summary.turns,
            got.summary.stop_reason,
        )

    async def test_the_lease_tells_the_sessions_newest_seq(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """A claimed lease's log_seq covers every event of the session so far."""
        seqs = await store.append([deferred(A, clock.now), user(A)])
        (got,) = await claim(store, clock, holder("me"))
        assert got.lease.log_seq is not None
        assert max(seqs) <= got.lease.log_seq

    async def test_limit(self, store: EventLog, clock: FakeClock) -> None:
        """At most ``limit`` sessions, the earliest due; the rest are left for the next claim."""
        now = clock.now
        await store.append(
            [deferred(key, now - timedelta(minutes=n)) for n, key in enumerate((A, B, C), 1)]
        )
        assert [C, B] == keys(await claim(store, clock, holder("one"), limit=2))
        assert [A] == keys(await claim(store, clock, holder("two"), limit=2))
        assert [] == await claim(store, clock, holder("three"), limit=2)

    async def test_a_limit_of_nothing_claims_nothing(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """``limit=0`` takes no lease."""
        await store.append([deferred(A, clock.now)])
        assert [] == await claim(store, clock, holder("one"), limit=0)
        assert [A] == keys(await claim(store, clock, holder("two"), limit=1))

    async def test_bad_limit_and_ttl_are_refused(self, store: EventLog, clock: FakeClock) -> None:
        """A negative limit or a ttl of no time is a misuse: ValueError naming it."""
        await store.append([deferred(A, clock.now)])
        with pytest.raises(ValueError, match="limit"):
            await store.claim_due(clock.now, holder("me"), TTL, limit=-1)
        with pytest.raises(ValueError, match="ttl"):
            await store.claim_due(clock.now, holder("me"), 0, limit=1)
        assert [A] == keys(await claim(store, clock, holder("me")))

    async def test_never_claims_what_is_not_due(self, store: EventLog, clock: FakeClock) -> None:
        """Not yet due, finished, stopped, paused (by its checkpoint or a request after it),
        running, and deferred-then-completed sessions are never claimed."""
        past = clock.now - timedelta(hours=1)
        await store.append(
            [
                deferred(A, clock.now + timedelta(minutes=5)),
                checkpoint(B, stop_reason="completed"),
                deferred(C, past, stopped=True),
                deferred(D, past, paused=True),
                deferred(E, past),
                Event.create(E, Control("pause")),
                deferred(F, past),
                Event.create(F, Control("stop")),
                checkpoint(G, next_wake_at=past),
                deferred(H, past),
                checkpoint(H, 2, stop_reason="completed"),
            ]
        )
        assert [] == await claim(store, clock, holder("me"))
        assert [D, E] == sorted(
            (s.key for s in await store.due_sessions(clock.now) if s.paused), key=str
        )

    async def test_an_unpaused_session_is_claimed(self, store: EventLog, clock: FakeClock) -> None:
        """A resume request after a pause makes the sleeping session claimable again."""
        await store.append([deferred(A, clock.now), Event.create(A, Control("pause"))])
        assert [] == await claim(store, clock, holder("me"))
        await store.append([Event.create(A, Control("resume"))])
        assert [A] == keys(await claim(store, clock, holder("me")))

    async def test_a_session_held_by_a_live_holder_is_skipped(
        self, store: EventLog, clock: FakeClock, dead_pid: int
    ) -> None:
        """A live lease keeps its session out of every claim: another host's (whatever its
        pid says here), a live process of this host's, the claimer's own."""
        now = clock.now
        await store.append(
            [deferred(key, now - timedelta(minutes=n)) for n, key in enumerate((A, B, C, D), 1)]
        )
        await store.acquire_lease(
            A, holder("remote", host="not-" + socket.gethostname(), pid=dead_pid), TTL
        )
        await store.acquire_lease(
            B, holder("alive", host=socket.gethostname(), pid=os.getpid()), TTL
        )
        me = holder("me")
        await store.acquire_lease(C, me, TTL)
        assert [D] == keys(await claim(store, clock, me))
        assert [] == await claim(store, clock, me)

    async def test_each_process_of_this_host_is_looked_at_once(
        self, store: EventLog, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A daemon holds many leases: a claim reads this host's process table once for each
        holding process, not once for each of its leases."""
        looked: list[int] = []

        def counting(pid: int, proc: str = _process.PROC) -> tuple[str, str] | None:
            looked.append(pid)
            return _process.process_stat(pid, proc)

        monkeypatch.setattr("eventlog._rules.process_stat", counting)
        alive = holder("alive", host=socket.gethostname(), pid=os.getpid())
        for key in (A, B, C, D, E):
            await store.append([deferred(key, clock.now)])
            await store.acquire_lease(key, alive, TTL)
        looked.clear()
        assert [] == await claim(store, clock, holder("me"))
        assert [os.getpid()] == looked

    async def test_a_claimed_session_is_not_claimed_again(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """Once claimed, a session is held: no second claim, by anyone, while the lease lives;
        acquire_lease is refused too."""
        await store.append([deferred(A, clock.now)])
        me = holder("me")
        assert [A] == keys(await claim(store, clock, me))
        clock.advance(TTL - 1)
        assert [] == await claim(store, clock, me)
        assert [] == await claim(store, clock, holder("other"))
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, holder("other"), TTL)

    async def test_an_expired_lease_is_claimed_with_a_larger_epoch(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """A lease past its expiry on the store's clock is taken over, with a larger epoch;
        the claimer's own expired lease too (a new holding: a new epoch)."""
        await store.append([deferred(A, clock.now), deferred(B, clock.now)])
        old = await store.acquire_lease(A, holder("old"), TTL)
        me = holder("me")
        (mine,) = await claim(store, clock, me, limit=1)
        assert B == mine.summary.key
        clock.advance(TTL + 1)
        taken = await claim(store, clock, me)
        assert [A, B] == sorted(keys(taken), key=str)
        epochs = {got.summary.key: got.lease.epoch for got in taken}
        assert old.epoch < epochs[A]
        assert mine.lease.epoch < epochs[B]

    async def test_a_gone_holder_of_this_host_is_claimed_at_once(
        self, store: EventLog, clock: FakeClock, dead_pid: int
    ) -> None:
        """A holder of this host whose process is gone loses its session to a claim before
        its lease expires."""
        await store.append([deferred(A, clock.now)])
        ghost = holder("ghost", host=socket.gethostname(), pid=dead_pid)
        old = await store.acquire_lease(A, ghost, 3600)
        (got,) = await claim(store, clock, holder("me"))
        assert old.epoch < got.lease.epoch

    async def test_a_released_session_is_claimed_with_a_larger_epoch(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """Epochs count on after a release: the next claim is a new holding."""
        await store.append([deferred(A, clock.now)])
        (first,) = await claim(store, clock, holder("me"))
        await store.release_lease(first.lease)
        (second,) = await claim(store, clock, holder("me"))
        assert first.lease.epoch < second.lease.epoch


class TestClaimInterrupted:
    """claim_due(interrupted=True): also the sessions whose run died without a stop reason."""

    async def _crashes(self, store: EventLog, clock: FakeClock) -> None:
        """B due; A and C crashed mid-run, C longer ago; D ended by a signal (not crashed)."""
        await store.append(
            [
                crashed(A, clock.now - timedelta(minutes=1)),
                deferred(B, clock.now - timedelta(minutes=1)),
                crashed(C, clock.now - timedelta(minutes=7)),
                checkpoint(D, stop_reason="context_cancelled"),
            ]
        )

    async def test_only_with_the_flag(self, store: EventLog, clock: FakeClock) -> None:
        """Without ``interrupted`` a crashed session is not claimed."""
        await self._crashes(store, clock)
        assert [B] == keys(await claim(store, clock, holder("me")))

    async def test_after_the_due_ones_oldest_first(self, store: EventLog, clock: FakeClock) -> None:
        """The due sessions first, then the crashed ones, the one that wrote last, last."""
        await self._crashes(store, clock)
        assert [B, C, A] == keys(await claim(store, clock, holder("me"), interrupted=True))

    async def test_the_limit_counts_both(self, store: EventLog, clock: FakeClock) -> None:
        """``limit`` bounds due and crashed sessions together."""
        await self._crashes(store, clock)
        assert [B, C] == keys(await claim(store, clock, holder("me"), limit=2, interrupted=True))
        assert [A] == keys(await claim(store, clock, holder("two"), interrupted=True))

    async def test_a_held_run_is_not_interrupted(self, store: EventLog, clock: FakeClock) -> None:
        """A run going on (a live lease) is left to its holder; once its lease expires, the
        session is claimed with a larger epoch."""
        await store.append([crashed(A, clock.now)])
        running = await store.acquire_lease(A, holder("runner"), TTL)
        assert [] == await claim(store, clock, holder("me"), interrupted=True)
        clock.advance(TTL + 1)
        (got,) = await claim(store, clock, holder("me"), interrupted=True)
        assert running.epoch < got.lease.epoch

    async def test_stopped_and_paused_crashes_are_left(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """A crashed session stopped or paused since is not claimed."""
        await store.append(
            [
                crashed(A, clock.now),
                Event.create(A, Control("stop")),
                crashed(B, clock.now),
                Event.create(B, Control("pause")),
            ]
        )
        assert [] == await claim(store, clock, holder("me"), interrupted=True)


class TestTwoClaimers:
    """Two claimers never get the same session while a lease on it is live."""

    async def test_sequential_claimers_share_the_due_sessions(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """Claims by two holders in turn split the due sessions between them, none twice."""
        now = clock.now
        await store.append(
            [deferred(key, now - timedelta(minutes=n)) for n, key in enumerate((A, B, C, D, E), 1)]
        )
        one = keys(await claim(store, clock, holder("one"), limit=3))
        two = keys(await claim(store, clock, holder("two"), limit=3))
        assert [E, D, C] == one
        assert [B, A] == two
        assert [] == await claim(store, clock, holder("one"), limit=3)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def two_logs(
    request: pytest.FixtureRequest, db_path: Path, clock: FakeClock
) -> AsyncIterator[tuple[EventLog, EventLog]]:
    """Two logs of one store on one database, each with its own connections."""
    first: SqliteEventLog | PostgresEventLog
    second: SqliteEventLog | PostgresEventLog
    if request.param == "sqlite":
        first, second = SqliteEventLog(db_path, clock=clock), SqliteEventLog(db_path, clock=clock)
    else:
        dsn = request.getfixturevalue("pg_dsn")
        first = PostgresEventLog(dsn, clock=clock, max_size=4)
        second = PostgresEventLog(dsn, clock=clock, max_size=4)
    async with first, second:
        yield first, second


class TestConcurrentClaimers:
    """Claimers on two connections to one database, at once."""

    async def test_every_session_is_claimed_exactly_once(
        self, two_logs: tuple[EventLog, EventLog], clock: FakeClock
    ) -> None:
        """Tasks on two logs claim small batches until nothing is due: each session once."""
        first, second = two_logs
        sessions = [SessionKey("app", "ops", f"s{n:02}") for n in range(40)]
        await first.append(
            [deferred(key, clock.now - timedelta(seconds=n)) for n, key in enumerate(sessions)]
        )
        got: list[tuple[str, Claim]] = []

        async def claimer(log: EventLog, name: str) -> None:
            who = holder(name)
            while batch := await log.claim_due(clock.now, who, TTL, limit=3):
                got.extend((name, one) for one in batch)

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(claimer, first, f"first-{n}")
                tg.start_soon(claimer, second, f"second-{n}")
        claimed = [one.summary.key for _, one in got]
        assert sorted(sessions, key=str) == sorted(claimed, key=str)
        for name, one in got:
            assert holder(name) == one.lease.holder
        with pytest.raises(SessionLocked):
            await second.acquire_lease(sessions[0], holder("late"), TTL)


class TestRenewLeases:
    """renew_leases: many leases renewed in one step; a lost one is left out."""

    async def test_renews_several_at_once(self, store: EventLog, clock: FakeClock) -> None:
        """Leases of several holders and sessions all move to now + ttl, epochs kept, in the
        order given."""
        await store.append([deferred(A, clock.now), deferred(B, clock.now)])
        claims = await claim(store, clock, holder("me"))
        other = await store.acquire_lease(C, holder("other"), TTL)
        leases = [claims[1].lease, other, claims[0].lease]
        clock.advance(20)
        renewed = await store.renew_leases(leases, 60)
        later = clock.now + timedelta(seconds=60)
        assert [attrs.evolve(lease, expires_at=later) for lease in leases] == renewed
        clock.advance(59)
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, holder("third"), TTL)
        assert [] == await claim(store, clock, holder("third"))

    async def test_leaves_out_a_lease_taken_over(self, store: EventLog, clock: FakeClock) -> None:
        """A lease taken over after its expiry, or released, is not renewed, nor given back;
        the others are; the new holder keeps its lease."""
        await store.append([deferred(key, clock.now) for key in (A, B, C)])
        claims = {got.summary.key: got.lease for got in await claim(store, clock, holder("me"))}
        clock.advance(TTL + 1)
        (taken,) = await store.claim_due(clock.now, holder("thief"), TTL, limit=1)
        assert A == taken.summary.key
        await store.release_lease(claims[C])
        renewed = await store.renew_leases([claims[A], claims[B], claims[C]], TTL)
        assert [B] == [lease.key for lease in renewed]
        with pytest.raises(SessionLocked) as caught:
            await store.acquire_lease(A, holder("third"), TTL)
        assert str(holder("thief")) == caught.value.holder
        assert taken.lease.epoch == (await store.renew_lease(taken.lease, TTL)).epoch

    async def test_nothing_to_renew(self, store: EventLog) -> None:
        """No leases: nothing renewed. A ttl of no time is refused all the same."""
        assert [] == await store.renew_leases([], TTL)
        with pytest.raises(ValueError, match="ttl"):
            await store.renew_leases([], 0)


class TestClaimedLeaseFences:
    """A claimed lease fences appends like an acquired one."""

    async def test_the_claimer_writes_and_a_stale_claimer_does_not(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """The claim's lease lets its holder append; once another claimer took the session
        over, the stale lease writes nothing (LeaseLost) and the new one writes."""
        await store.append([deferred(A, clock.now)])
        (first,) = await claim(store, clock, holder("one"))
        written = await add_fenced(store, [user(A, "from one")], first.lease)
        clock.advance(TTL + 1)
        (second,) = await claim(store, clock, holder("two"))
        with pytest.raises(LeaseLost):
            await store.append([user(A, "late")], lease=first.lease)
        written += await add_fenced(store, [user(A, "from two")], second.lease)
        assert written == (await store.read(A))[1:]

    async def test_append_and_release_frees_a_claimed_session(
        self, store: Any, clock: FakeClock
    ) -> None:
        """A run that ends writes its checkpoint and lets the session go in one step."""
        await store.append([deferred(A, clock.now)])
        (got,) = await claim(store, clock, holder("one"))
        await store.append_and_release([deferred(A, clock.now, turns=2)], got.lease)
        (again,) = await claim(store, clock, holder("two"))
        assert (2, got.lease.epoch < again.lease.epoch) == (again.summary.turns, True)

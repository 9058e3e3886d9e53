"""PostgresEventLog beyond the shared contract: seq order under the session lock, claims with
SKIP LOCKED, the schema's version, the server's errors, and notifications through LISTEN."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventlog import (
    MAX_KEY_LENGTH,
    Checkpoint,
    Control,
    CorruptEvent,
    Event,
    EventKind,
    InboxQueued,
    LeaseHolder,
    LeaseLost,
    PostgresEventLog,
    SessionKey,
    SessionLocked,
    StoreUnavailable,
    UserMessage,
    Watch,
)
from eventlog._postgres import _conn as pgconn
from eventlog._postgres._conn import mask_dsn
from eventlog._postgres._sql import STORE_VERSION, notice
from tests.eventlog.conftest import FakeClock

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

A = SessionKey("app", "ops", "a")
B = SessionKey("app", "ops", "b")
C = SessionKey("app", "ops", "c")

#: Seconds a test waits for what must happen soon (a notification) before it fails, not a
#: measure of speed: a broken wake-up fails here instead of hanging until the test timeout.
SOON = 30


def user(key: SessionKey, text: str = "hello") -> Event:
    return Event.create(key, UserMessage(text, 1))


def checkpoint(key: SessionKey, **fields: Any) -> Event:
    return Event.create(key, Checkpoint(1, 10, 5, 0.25, "go on", **fields))


def holder(name: str, host: str = "elsewhere", pid: int = 4242) -> LeaseHolder:
    return LeaseHolder(host=host, pid=pid, token=name)


@pytest.fixture
async def log(pg_dsn: str, clock: FakeClock) -> AsyncIterator[PostgresEventLog]:
    """An open log in the test's schema."""
    async with PostgresEventLog(pg_dsn, clock=clock, max_size=4) as opened:
        yield opened


@pytest.fixture
async def other(pg_dsn: str, clock: FakeClock) -> AsyncIterator[PostgresEventLog]:
    """A second log on the same schema, with its own pool: another worker."""
    async with PostgresEventLog(pg_dsn, clock=clock, max_size=4) as opened:
        yield opened


async def deferred(log: PostgresEventLog, clock: FakeClock, *keys: SessionKey) -> None:
    """Checkpoint ``keys`` deferred, due now, the first key woken earliest."""
    await log.append(
        [
            checkpoint(key, stop_reason="deferred", next_wake_at=clock.now - timedelta(minutes=n))
            for n, key in enumerate(reversed(keys), 1)
        ]
    )


async def wait_blocked_by(conn: psycopg.AsyncConnection[Any], blocker: int) -> None:
    """Return once some backend waits for a lock that backend ``blocker`` holds."""
    with anyio.fail_after(SOON):
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (blocker,),
            )
            row = await cur.fetchone()
            if row is not None and row[0]:
                return
            await anyio.sleep(0.01)


class TestSeqOrder:
    """Within a session, commit order is seq order: seqs are taken under the session's lock."""

    async def test_an_append_waiting_for_the_session_gets_a_later_seq(
        self, log: PostgresEventLog, pg_dsn: str
    ) -> None:
        """An append that waits for its session's row gets a larger seq than an append of
        another session that committed meanwhile: it took its seqs once it had the lock, so
        a reader after its last seq of the session cannot miss it."""
        await log.append([user(A), user(B)])
        async with await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
            await blocker.execute(
                "SELECT sid FROM eventlog_sessions WHERE session_id = 'a' FOR UPDATE"
            )
            async with (
                await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as look,
                anyio.create_task_group() as tg,
            ):
                seqs: list[int] = []

                async def late() -> None:
                    seqs.extend(await log.append([user(A, "late")]))

                tg.start_soon(late)
                await wait_blocked_by(look, blocker.info.backend_pid)
                (other_seq,) = await log.append([user(B, "meanwhile")])
                await blocker.commit()
        assert seqs[0] > other_seq

    async def test_a_batch_of_many_sessions_takes_increasing_seqs(
        self, log: PostgresEventLog
    ) -> None:
        """A batch over three sessions gets increasing seqs, in batch order."""
        seqs = await log.append([user(C), user(A), user(B), user(A)])
        assert sorted(seqs) == seqs
        assert [seqs[1], seqs[3]] == [event.seq for event in await log.read(A)]


class TestCancellation:
    """A caller cancelled while its statement is on the server."""

    async def test_a_cancelled_append_finishes_and_keeps_its_connection(
        self, pg_dsn: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An append cancelled while it waits for its session's row (as a run's watch or
        heartbeat is when the run ends) finishes its statement rather than being cut off
        mid-query; its pooled connection is not closed, and serves the next call."""
        async with PostgresEventLog(pg_dsn, clock=clock, min_size=1, max_size=1) as log:
            await log.append([user(A)])
            ((backend,),) = await log._db.all("ask", "SELECT pg_backend_pid()", {})
            async with await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
                await blocker.execute("SELECT sid FROM eventlog_sessions FOR UPDATE")
                async with (
                    await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as look,
                    anyio.create_task_group() as tg,
                ):
                    scope = anyio.CancelScope()

                    async def cancelled() -> None:
                        with scope:
                            await log.append([user(A, "cancelled")])

                    tg.start_soon(cancelled)
                    await wait_blocked_by(look, blocker.info.backend_pid)
                    scope.cancel()
                    for _ in range(10):  # anyio delivers the cancellation again and again
                        await anyio.lowlevel.checkpoint()
                    await blocker.commit()
            assert 2 == await log.count(A)
            assert [(backend,)] == await log._db.all("ask", "SELECT pg_backend_pid()", {})
        assert "closing connection" not in caplog.text

    async def test_a_statement_without_an_answer_within_the_timeout(
        self, pg_dsn: str, clock: FakeClock
    ) -> None:
        """A statement the server does not answer within the log's timeout (here: it waits
        for a row another transaction holds) fails with StoreUnavailable; the log goes on."""
        async with PostgresEventLog(pg_dsn, clock=clock, timeout=0.2) as log:
            await log.append([user(A)])
            async with await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
                await blocker.execute("SELECT sid FROM eventlog_sessions FOR UPDATE")
                with pytest.raises(StoreUnavailable, match="no answer within the timeout"):
                    await log.append([user(A, "blocked")])
            assert 1 == len(await log.append([user(B)]))

    async def test_a_callers_deadline_shorter_than_the_timeout_is_kept(
        self, pg_dsn: str, clock: FakeClock
    ) -> None:
        """A statement under a caller's deadline (a run's bounded last write) that the server
        does not answer ends at that deadline, not at the log's longer timeout: it fails with
        StoreUnavailable then (whether it lands later is unknown, as after any timeout), and
        the log goes on."""
        async with PostgresEventLog(pg_dsn, clock=clock, timeout=SOON) as log:
            await log.append([user(A)])
            async with await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
                await blocker.execute("SELECT sid FROM eventlog_sessions FOR UPDATE")
                with anyio.fail_after(SOON / 3):  # far less than the log's own timeout
                    with anyio.move_on_after(0.2), pytest.raises(StoreUnavailable):
                        await log.append([user(A, "blocked")])
            assert 1 == len(await log.append([user(B)]))


class TestClaims:
    """claim_due on Postgres: one statement, SKIP LOCKED, a new epoch."""

    async def test_two_workers_claiming_at_once_never_share_a_session(
        self, log: PostgresEventLog, other: PostgresEventLog, clock: FakeClock
    ) -> None:
        """Two logs claiming in turns and at once split the due sessions: each claimed once."""
        keys = [SessionKey("app", "ops", f"s{n:02}") for n in range(30)]
        await deferred(log, clock, *keys)
        claimed: dict[str, list[SessionKey]] = {"one": [], "two": []}

        async def worker(name: str, store: PostgresEventLog) -> None:
            while True:
                got = await store.claim_due(clock.now, holder(name), ttl=60, limit=3)
                if not got:
                    return
                claimed[name] += [claim.summary.key for claim in got]

        async with anyio.create_task_group() as tg:
            tg.start_soon(worker, "one", log)
            tg.start_soon(worker, "two", other)
        together = claimed["one"] + claimed["two"]
        assert sorted(map(str, together)) == sorted(map(str, keys))

    async def test_a_locked_session_is_skipped_not_waited_for(
        self, log: PostgresEventLog, clock: FakeClock, pg_dsn: str
    ) -> None:
        """A session whose row another transaction holds is skipped: the claim takes the next
        one at once, and the skipped one is claimed once it is free."""
        await deferred(log, clock, A, B)
        async with await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
            await blocker.execute(
                "SELECT sid FROM eventlog_sessions WHERE session_id = 'a' FOR UPDATE"
            )
            with anyio.fail_after(SOON):
                first = await log.claim_due(clock.now, holder("me"), ttl=60, limit=1)
            await blocker.rollback()
        later = await log.claim_due(clock.now, holder("me"), ttl=60, limit=5)
        assert ([B], [A]) == ([c.summary.key for c in first], [c.summary.key for c in later])

    async def test_a_takeover_bumps_the_epoch_and_fences_the_old_holder(
        self, log: PostgresEventLog, clock: FakeClock
    ) -> None:
        """A claim of an expired lease gets the next epoch; the old holder writes nothing."""
        await deferred(log, clock, A)
        (first,) = await log.claim_due(clock.now, holder("old"), ttl=30, limit=5)
        clock.advance(31)
        (second,) = await log.claim_due(clock.now, holder("new"), ttl=30, limit=5)
        assert first.lease.epoch + 1 == second.lease.epoch
        assert str(holder("new")) == second.summary.holder
        with pytest.raises(LeaseLost, match="new"):
            await log.append([user(A, "stale")], lease=first.lease)
        (fresh,) = await log.append([user(A, "fresh")], lease=second.lease)
        assert [fresh] == [event.seq for event in await log.read(A, kinds=[EventKind.USER_MESSAGE])]

    async def test_a_dead_holder_of_this_host_is_claimed_at_once(
        self, log: PostgresEventLog, clock: FakeClock, dead_pid: int
    ) -> None:
        """A live-looking lease of a process of this host that is gone is claimed before it
        expires; one of a live process is not."""
        await deferred(log, clock, A, B)
        here = socket.gethostname()
        await log.acquire_lease(A, holder("ghost", here, dead_pid), ttl=3600)
        await log.acquire_lease(B, LeaseHolder.this_process(), ttl=3600)
        claims = await log.claim_due(clock.now, holder("me"), ttl=60, limit=5)
        assert [A] == [claim.summary.key for claim in claims]

    async def test_the_claim_notifies(self, log: PostgresEventLog, clock: FakeClock) -> None:
        """Claiming a session wakes its watchers (in the claim's own statement)."""
        await deferred(log, clock, A)
        async with log.watch(A) as watch:
            await log.claim_due(clock.now, holder("me"), ttl=60, limit=5)
            with anyio.fail_after(SOON):
                await watch.wait()

    async def test_a_wake_from_another_process_is_claimed_at_once(
        self, log: PostgresEventLog, other: PostgresEventLog, clock: FakeClock
    ) -> None:
        """A daemon waits (watch(None)) with nothing due, a session deferred for an hour:
        another process's wake request wakes it, and its next claim takes that session."""
        later = clock.now + timedelta(hours=1)
        await log.append([checkpoint(A, stop_reason="deferred", next_wake_at=later)])
        assert [] == await log.claim_due(clock.now, holder("daemon"), ttl=60, limit=5)
        async with log.watch() as watch:
            await other.append([Event.create(A, Control("wake"), at=clock.now)])
            with anyio.fail_after(SOON):
                await watch.wait()
            claims = await log.claim_due(clock.now, holder("daemon"), ttl=60, limit=5)
        assert [(A, clock.now)] == [(c.summary.key, c.summary.next_wake_at) for c in claims]

    async def test_renew_leases_leaves_out_the_lost_ones(
        self, log: PostgresEventLog, clock: FakeClock
    ) -> None:
        """One statement renews the leases still ours, in the order given; a lease taken
        over is left out."""
        mine = [await log.acquire_lease(key, holder("me"), ttl=30) for key in (C, A, B)]
        clock.advance(31)
        await log.acquire_lease(A, holder("thief"), ttl=30)
        renewed = await log.renew_leases(mine, ttl=30)
        assert [C, B] == [lease.key for lease in renewed]
        assert {clock.now + timedelta(seconds=30)} == {lease.expires_at for lease in renewed}
        with pytest.raises(SessionLocked):
            await log.acquire_lease(C, holder("other"), ttl=30)


class TestSchema:
    """The schema: made on first use, versioned, a newer one refused."""

    async def test_made_on_first_use_at_the_current_version(
        self, pg_dsn: str, clock: FakeClock
    ) -> None:
        """Three logs opening an empty schema at once all open it; it says the current version."""
        logs = [PostgresEventLog(pg_dsn, clock=clock) for _ in range(3)]
        async with anyio.create_task_group() as tg:
            for opening in logs:
                tg.start_soon(opening.open)
        for opened in logs:
            await opened.aclose()
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            cur = await conn.execute("SELECT value FROM eventlog_meta")
            assert [(str(STORE_VERSION),)] == await cur.fetchall()

    async def test_a_newer_schema_is_refused(self, pg_dsn: str, clock: FakeClock) -> None:
        """A schema a newer release wrote raises StoreUnavailable and is left as it is."""
        async with PostgresEventLog(pg_dsn, clock=clock) as log:
            await log.append([user(A)])
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute("UPDATE eventlog_meta SET value = '99'")
            newer = PostgresEventLog(pg_dsn, clock=clock)
            with pytest.raises(StoreUnavailable, match=r"schema version 99.*upgrade"):
                await newer.open()
            cur = await conn.execute("SELECT value FROM eventlog_meta")
            assert [("99",)] == await cur.fetchall()

    async def test_events_and_sessions_survive_a_new_log(
        self, log: PostgresEventLog, pg_dsn: str, clock: FakeClock
    ) -> None:
        """Another log on the same schema reads what this one wrote, summaries included."""
        written = await log.append([user(A), checkpoint(A, stop_reason="completed")])
        async with PostgresEventLog(pg_dsn, clock=clock) as again:
            assert written == [event.seq for event in await again.read(A)]
            assert await log.sessions() == await again.sessions()


class TestText:
    """What PostgreSQL text cannot hold (U+0000) still goes in and comes back."""

    async def test_nul_in_keys_and_authors(self, log: PostgresEventLog) -> None:
        """A session key and an author with NUL and DLE characters round-trip."""
        key = SessionKey("a\x00p", "\x10", "s\x10\x000")
        event = Event.create(key, UserMessage("hi", 1), author="x\x00\x10y")
        await log.append([event, checkpoint(key)])
        (back, _) = await log.read(key)
        assert (event.author, event.id) == (back.author, back.id)
        assert [key] == [summary.key for summary in await log.sessions()]
        assert [] == await log.read(SessionKey("a", "\x10", "s"))

    async def test_nul_in_a_stop_reason(self, log: PostgresEventLog) -> None:
        """A checkpoint's stop reason with NUL and DLE characters comes back in the summary
        (hypothesis found one refused)."""
        await log.append([checkpoint(A, stop_reason="x\x00\x10y")])
        assert ["x\x00\x10y"] == [summary.stop_reason for summary in await log.sessions()]


class TestListedCheckpoints:
    """sessions() with a latest checkpoint row it cannot read back."""

    @pytest.mark.parametrize(
        "tampering",
        ["payload = '{not json'", "v = 99", """payload = '{"turns": "many"}'"""],
        ids=["not-json", "newer-schema", "wrong-type"],
    )
    async def test_an_unreadable_checkpoint_leaves_the_listing_whole(
        self, log: PostgresEventLog, pg_dsn: str, tampering: str
    ) -> None:
        """That session is listed as its summary row says, without its checkpoint; every
        other session with its own. Reading the checkpoint itself still fails loudly."""
        await log.append([user(A), checkpoint(A), user(B), checkpoint(B)])
        before = await log.sessions()
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(
                f"UPDATE eventlog_events AS e SET {tampering} FROM eventlog_sessions AS s"
                " WHERE e.sid = s.sid AND e.seq = s.checkpoint_seq AND s.session_id = 'a'"
            )
        listed = await log.sessions()
        with pytest.raises(CorruptEvent):
            await log.latest_checkpoint(A)
        assert [attrs.evolve(s, checkpoint=None) if s.key == A else s for s in before] == listed
        assert None not in [s.checkpoint for s in before]


class TestWideNumbers:
    """The summary's columns hold what a checkpoint may say (SQLite's integers are 64-bit)."""

    async def test_turns_past_32_bits(self, log: PostgresEventLog) -> None:
        """A checkpoint of 2**40 turns is stored and summarised (a 32-bit column refused it)."""
        event = Event.create(A, Checkpoint(2**40, 2**41, 5, 0.25, "go on"))
        await log.append([event])
        assert [2**40] == [summary.turns for summary in await log.sessions()]


class TestServerErrors:
    """A server that cannot be reached: StoreUnavailable naming the DSN, password masked."""

    async def test_unreachable_server(self, clock: FakeClock) -> None:
        """Nothing listens on port 1: the error names the DSN, never the password."""
        log = PostgresEventLog("postgresql://me:s3cret@127.0.0.1:1/test", clock=clock, timeout=2)
        assert "s3cret" not in repr(log)
        with pytest.raises(StoreUnavailable, match=r"postgresql://me:\*\*\*@127.0.0.1:1/test"):
            await log.append([user(A)])
        with pytest.raises(StoreUnavailable) as caught:
            await log.sessions()
        assert "s3cret" not in str(caught.value)
        assert caught.value.transient  # a server that may come up
        await log.aclose()

    async def test_connections_the_server_ended_while_idle_are_not_lent(
        self, pg_dsn: str, clock: FakeClock
    ) -> None:
        """The server ends every pooled connection while they sit idle (a restart, a failover,
        an idle timeout): the next calls are served on new connections, none fails."""
        app = f"idle_{secrets.token_hex(4)}"
        async with PostgresEventLog(f"{pg_dsn}&application_name={app}", clock=clock) as log:
            async with anyio.create_task_group() as tg:  # several connections in the pool
                for n in range(3):
                    tg.start_soon(log.append, [user(A, f"m{n}")])
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
                cur = await admin.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                    " FROM pg_stat_activity WHERE application_name = %s",
                    (app,),
                )
                assert (await cur.fetchone()) not in (None, (0,))
            await anyio.sleep(0.1)  # the server's goodbyes reach the client's sockets
            for n in range(3, 6):
                await log.append([user(A, f"m{n}")])
            assert 6 == len(await log.read(A))

    @pytest.mark.parametrize(
        ("dsn", "shown"),
        [
            (
                "postgresql://me:pw@db:5432/x?sslmode=require",
                "postgresql://me:***@db:5432/x?sslmode=require",
            ),
            ("postgres://db/x", "postgres://db/x"),
            ("host=db password=pw user=me", "host=db password=*** user=me"),
            ("host=db password='p w' user=me", "host=db password=*** user=me"),
        ],
    )
    def test_mask_dsn(self, dsn: str, shown: str) -> None:
        """URL and key=value passwords are masked; the rest is kept."""
        assert shown == mask_dsn(dsn)

    def test_import_without_psycopg(self) -> None:
        """``import eventlog`` works without psycopg; PostgresEventLog then names the extra."""
        code = (
            "import sys; sys.modules['psycopg'] = None; import eventlog\n"
            "try:\n    eventlog.PostgresEventLog\nexcept ImportError as exc:\n    print(exc)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        assert "pip install 'bounded-autonomous[postgres]'" in out


async def sentinel(log: PostgresEventLog, watch: Watch, key: SessionKey) -> None:
    """Notify ``key`` and wait for ``watch`` (of ``key``) to wake: every notification sent
    before has been dispatched by then (one connection delivers them in commit order)."""
    await log.append([Event.create(key, Control("wake"))])
    with anyio.fail_after(SOON):
        await watch.wait()


class TestWatch:
    """Notifications: sent in the writing transaction, coalesced, dispatched by session."""

    async def test_an_inject_from_another_log_wakes_its_session_only(
        self, log: PostgresEventLog, other: PostgresEventLog
    ) -> None:
        """A message queued by another process wakes the watch of its session, not another's."""
        async with log.watch(A) as watch_a, log.watch(B) as watch_b, log.watch(C) as last:
            await other.append([Event.create(A, InboxQueued("hi", "m1"))])
            with anyio.fail_after(SOON):
                await watch_a.wait()
            await sentinel(other, last, C)
            assert not watch_b.woken

    async def test_many_notifications_one_wake(
        self, log: PostgresEventLog, other: PostgresEventLog
    ) -> None:
        """Three control requests, one wake; the watch is quiet after it."""
        async with log.watch(A) as watch, log.watch(C) as last:
            for action in ("pause", "resume", "wake"):
                await other.append([Event.create(A, Control(action))])
            await sentinel(other, last, C)
            await watch.wait()
            assert not watch.woken

    async def test_only_waking_kinds_notify(self, log: PostgresEventLog) -> None:
        """A message of the run itself does not wake its session's watchers."""
        async with log.watch(A) as watch, log.watch(C) as last:
            await log.append([user(A)])
            await sentinel(log, last, C)
            assert not watch.woken

    async def test_a_release_and_a_checkpoint_wake_the_watch_of_every_session(
        self, log: PostgresEventLog, other: PostgresEventLog, clock: FakeClock
    ) -> None:
        """watch(None) wakes on a lease release and on a checkpoint, of any session."""
        lease = await other.acquire_lease(A, holder("me"), ttl=30)
        async with log.watch() as watch:
            await other.release_lease(lease)
            with anyio.fail_after(SOON):
                await watch.wait()
            await other.append([checkpoint(B, stop_reason="deferred", next_wake_at=clock.now)])
            with anyio.fail_after(SOON):
                await watch.wait()

    async def test_a_lost_fence_notifies_nothing(
        self, log: PostgresEventLog, clock: FakeClock
    ) -> None:
        """A stale holder's checkpoint writes nothing and so wakes nobody."""
        stale = await log.acquire_lease(A, holder("old"), ttl=30)
        clock.advance(31)
        await log.acquire_lease(A, holder("new"), ttl=30)
        async with log.watch(A) as watch, log.watch(C) as last:
            with pytest.raises(LeaseLost):
                await log.append([checkpoint(A)], lease=stale)
            await sentinel(log, last, C)
            assert not watch.woken

    async def test_a_dropped_listener_reconnects(self, log: PostgresEventLog, pg_dsn: str) -> None:
        """The listening connection killed by the server: the watch wakes (spuriously), the
        connection is reopened, and later notifications arrive again."""
        async with log.watch(A) as watch:
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE query LIKE %s AND pid <> pg_backend_pid()",
                    (f'LISTEN "{log.channel}"',),
                )
            listener = log._listener
            assert listener is not None
            with anyio.fail_after(SOON):
                await watch.wait()  # the drop: a spurious wake
                await watch.wait()  # the reconnect: another
            assert 2 == listener.connections
            await log.append([Event.create(A, InboxQueued("again", "m2"))])
            with anyio.fail_after(SOON):
                await watch.wait()

    async def test_closing_the_log_ends_its_watches(self, log: PostgresEventLog) -> None:
        """A watch waiting when its log closes returns; its next wait, and a new watch, raise
        StoreUnavailable."""
        async with log.watch(A) as watch:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch.wait)
                await anyio.wait_all_tasks_blocked()
                await log.aclose()
            with pytest.raises(StoreUnavailable, match="closed"):
                await watch.wait()
        with pytest.raises(StoreUnavailable, match="closed"):
            async with log.watch(A):
                pass

    async def test_two_waiting_watches_share_the_reading(
        self, log: PostgresEventLog, other: PostgresEventLog
    ) -> None:
        """Two watches wait at once: the one that reads hands the connection over when its
        own change comes, and the other still gets its own."""
        async with log.watch(A) as watch_a, log.watch(B) as watch_b:
            with anyio.fail_after(SOON):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watch_a.wait)
                    tg.start_soon(watch_b.wait)
                    await anyio.wait_all_tasks_blocked()
                    await other.append([Event.create(A, Control("wake"))])
                    await other.append([Event.create(B, Control("wake"))])


#: A session whose key is as long as keys may be, of characters that take room: 4,912 bytes
#: as JSON, where a notification carries fewer than 8,000 (a longer key, which the limit now
#: refuses, failed its session's writes when notifications carried the key).
LONG = SessionKey("é" * MAX_KEY_LENGTH, "😀" * MAX_KEY_LENGTH, "\x00é" * (MAX_KEY_LENGTH // 2))


class TestNotificationPayload:
    """A notification names its session by a short digest of the key, never the key itself:
    a long key cannot make it too long for pg_notify, which would fail the write with it."""

    @given(st.builds(SessionKey, st.text(), st.text(), st.text(max_size=3000)))
    def test_a_notice_is_a_fixed_size_digest(self, key: SessionKey) -> None:
        """Whatever the key, its notice is 64 hex digits."""
        payload = notice(key)
        assert (64, True) == (len(payload.encode()), all(c in "0123456789abcdef" for c in payload))

    def test_the_parts_of_the_key_are_told_apart(self) -> None:
        """Keys whose parts join to the same text have different notices."""
        keys = [SessionKey("ab", "c", "d"), SessionKey("a", "bc", "d"), SessionKey("a", "b", "cd")]
        assert 3 == len({notice(key) for key in keys})

    async def test_a_long_key_session_is_written_and_wakes_its_watch(
        self, log: PostgresEventLog, other: PostgresEventLog, clock: FakeClock
    ) -> None:
        """A session with a long key is leased, appended to, checkpointed, injected into,
        released and claimed; each change that notifies wakes its watch, not another's."""
        async with log.watch(LONG) as watch, log.watch(A) as quiet, log.watch(C) as last:
            lease = await other.acquire_lease(LONG, holder("run"), ttl=30)
            await other.append([user(LONG)], lease=lease)
            wake = clock.now - timedelta(minutes=1)
            changes = [
                [checkpoint(LONG, stop_reason="deferred", next_wake_at=wake)],
                [Event.create(LONG, InboxQueued("m1", "hi"))],
            ]
            for events in changes:
                await other.append(events, lease=lease)
                with anyio.fail_after(SOON):
                    await watch.wait()
            await other.release_lease(lease)
            with anyio.fail_after(SOON):
                await watch.wait()
            (claim,) = await other.claim_due(clock.now, holder("daemon"), ttl=30, limit=5)
            with anyio.fail_after(SOON):
                await watch.wait()
            await other.append_and_release([checkpoint(LONG, stop_reason="completed")], claim.lease)
            with anyio.fail_after(SOON):
                await watch.wait()
            await sentinel(other, last, C)
            assert not quiet.woken
        listed = {summary.key for summary in await log.sessions()}
        assert (True, 4) == (LONG in listed, len(await log.read(LONG)))

    async def test_a_payload_of_another_writer_wakes_every_watch(
        self, log: PostgresEventLog, pg_dsn: str
    ) -> None:
        """A notification that is no notice (an older release named the session by its key)
        wakes every watch: a wake for nothing, never one lost."""
        async with log.watch(A) as watch_a, log.watch(B) as watch_b:
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
                await conn.execute("SELECT pg_notify(%s, %s)", (log.channel, '["app","ops","a"]'))
            with anyio.fail_after(SOON):
                await watch_a.wait()
                await watch_b.wait()


class TestLeaseStatements:
    """Taking a lease nobody holds is one statement (the session row added if need be): the
    locked read and decision of a lease that is held cost four round trips, paid only then."""

    @pytest.fixture
    def trips(self, monkeypatch: pytest.MonkeyPatch) -> list[str]:
        """The log's statements and transaction blocks, as they are sent."""
        seen: list[str] = []
        all_of, connection_of = pgconn.Database.all, pgconn.Database.connection

        async def all_counted(self: Any, action: Any, query: str, params: Any) -> Any:
            seen.append(query.split(maxsplit=1)[0])
            return await all_of(self, action, query, params)

        def connection_counted(self: Any, action: Any) -> Any:
            seen.append("transaction")
            return connection_of(self, action)

        monkeypatch.setattr(pgconn.Database, "all", all_counted)
        monkeypatch.setattr(pgconn.Database, "connection", connection_counted)
        return seen

    async def test_a_new_session_is_leased_in_one_statement(
        self, log: PostgresEventLog, trips: list[str]
    ) -> None:
        lease = await log.acquire_lease(A, holder("me"), ttl=30)
        assert (1, ["INSERT"]) == (lease.epoch, trips)

    async def test_a_released_or_expired_lease_is_taken_in_one_statement(
        self, log: PostgresEventLog, clock: FakeClock, trips: list[str]
    ) -> None:
        await log.release_lease(await log.acquire_lease(A, holder("one"), ttl=30))
        await log.acquire_lease(B, holder("one"), ttl=30)
        clock.advance(31)
        trips.clear()
        released = await log.acquire_lease(A, holder("two"), ttl=30)
        expired = await log.acquire_lease(B, holder("two"), ttl=30)
        assert (2, 2, ["INSERT", "INSERT"]) == (released.epoch, expired.epoch, trips)

    async def test_our_own_lease_is_taken_again_in_one_statement_at_its_epoch(
        self, log: PostgresEventLog, trips: list[str]
    ) -> None:
        first = await log.acquire_lease(A, holder("me"), ttl=30)
        again = await log.acquire_lease(A, holder("me"), ttl=60)
        assert (first.epoch, ["INSERT", "INSERT"]) == (again.epoch, trips)
        assert again.expires_at > first.expires_at

    async def test_a_held_lease_is_decided_with_its_row_locked(
        self, log: PostgresEventLog, trips: list[str]
    ) -> None:
        """A holder that is not us and has not expired may still be a gone process of this
        host: that is told in Python, with the row locked, as before."""
        await log.acquire_lease(A, holder("one"), ttl=30)
        trips.clear()
        with pytest.raises(SessionLocked):
            await log.acquire_lease(A, holder("two"), ttl=30)
        assert ["INSERT", "transaction"] == trips

    async def test_a_holder_differing_only_in_pid_is_another_holder(
        self, log: PostgresEventLog
    ) -> None:
        """The same token with another pid is not this holder: no retake, no kept epoch."""
        await log.acquire_lease(A, holder("me"), ttl=30)
        with pytest.raises(SessionLocked):
            await log.acquire_lease(A, holder("me", pid=4343), ttl=30)

"""PostgresEventLog's append statements: batches of every size on each statement, the fence
of each, and the schema migration that dropped the events' foreign key."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from eventlog import (
    Checkpoint,
    Event,
    LeaseHolder,
    LeaseLost,
    PostgresEventLog,
    SessionKey,
    UserMessage,
)
from eventlog._postgres import _sql as sql
from tests.eventlog.conftest import FakeClock

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

A = SessionKey("app", "ops", "a")

#: Batch sizes on both sides of the largest one with a statement of its own.
SIZES = sorted({1, 2, 3, sql.ROWS_STATEMENTS - 1, sql.ROWS_STATEMENTS, sql.ROWS_STATEMENTS + 1})


def users(n: int, key: SessionKey = A) -> list[Event]:
    return [Event.create(key, UserMessage(f"m{i}", i)) for i in range(n)]


@pytest.fixture
async def log(pg_dsn: str, clock: FakeClock) -> AsyncIterator[PostgresEventLog]:
    """An open log in the test's schema."""
    async with PostgresEventLog(pg_dsn, clock=clock, max_size=2) as opened:
        yield opened


async def foreign_keys(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> list[str]:
    """The foreign keys of the events table."""
    cur = await conn.execute(
        "SELECT conname FROM pg_constraint"
        " WHERE conrelid = 'eventlog_events'::regclass AND contype = 'f'"
    )
    return [str(row[0]) for row in await cur.fetchall()]


class TestBatches:
    """Every batch size, fenced or not, gets its seqs in batch order and reads back whole."""

    @pytest.mark.parametrize("size", SIZES)
    async def test_an_unfenced_batch(self, log: PostgresEventLog, size: int) -> None:
        """Seqs increase in batch order; the events read back as written."""
        batch = users(size)
        seqs = await log.append(batch)
        assert sorted(seqs) == seqs and len(set(seqs)) == size
        back = await log.read(A)
        assert [(e.id, e.payload, e.at, e.author) for e in batch] == [
            (e.id, e.payload, e.at, e.author) for e in back
        ]
        assert seqs == [event.seq for event in back]

    @pytest.mark.parametrize("size", SIZES)
    async def test_a_fenced_batch(self, log: PostgresEventLog, size: int) -> None:
        """A batch fenced by the live lease goes in, twice in a row."""
        lease = await log.acquire_lease(A, LeaseHolder("h", 1, "me"), ttl=30)
        first = await log.append(users(size), lease=lease)
        second = await log.append(users(size), lease=lease)
        assert len(first) == len(second) == size
        assert first + second == [event.seq for event in await log.read(A)]

    @pytest.mark.parametrize("size", SIZES)
    async def test_a_stale_holder_inserts_nothing(
        self, log: PostgresEventLog, clock: FakeClock, size: int
    ) -> None:
        """After a takeover, the old holder's batch raises LeaseLost and writes no row."""
        old = await log.acquire_lease(A, LeaseHolder("h", 1, "old"), ttl=30)
        await log.append(users(1), lease=old)
        clock.advance(31)
        await log.acquire_lease(A, LeaseHolder("h", 2, "new"), ttl=30)
        with pytest.raises(LeaseLost, match="now held by"):
            await log.append(users(size), lease=old)
        assert 1 == await log.count(A)

    async def test_a_released_lease_fences_too(self, log: PostgresEventLog) -> None:
        """A lease its holder released fences a later batch of it out."""
        lease = await log.acquire_lease(A, LeaseHolder("h", 1, "me"), ttl=30)
        await log.release_lease(lease)
        with pytest.raises(LeaseLost, match="released"):
            await log.append(users(2), lease=lease)
        assert 0 == await log.count(A)


#: What version 3 added: the summary's token columns.
DROP_TOKENS = (
    "ALTER TABLE eventlog_sessions DROP COLUMN input_tokens, DROP COLUMN cached_input_tokens"
)


class TestMigration:
    """Version 2 dropped the events' foreign key: every append locks its session's row, and
    session rows are never deleted, so the key checked nothing the statements do not.
    Version 3 added the summary's token columns."""

    async def test_a_new_schema_has_no_foreign_key(
        self, log: PostgresEventLog, pg_dsn: str
    ) -> None:
        """A schema made now is of the current version, its events with no foreign key."""
        await log.append(users(1))
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            cur = await conn.execute("SELECT value FROM eventlog_meta")
            assert [(str(sql.STORE_VERSION),)] == await cur.fetchall()
            assert [] == await foreign_keys(conn)

    async def test_version_1_is_migrated(self, pg_dsn: str, clock: FakeClock) -> None:
        """A version 1 schema (the events' foreign key on the session) is brought to the
        current version when opened: the key dropped, the events kept, appends go on."""
        async with PostgresEventLog(pg_dsn, clock=clock) as log:
            written = await log.append(users(3))
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(
                "ALTER TABLE eventlog_events ADD CONSTRAINT eventlog_events_sid_fkey"
                " FOREIGN KEY (sid) REFERENCES eventlog_sessions (sid)"
            )
            await conn.execute(DROP_TOKENS)
            await conn.execute("UPDATE eventlog_meta SET value = '1'")
            async with PostgresEventLog(pg_dsn, clock=clock) as log:
                more = await log.append(users(2))
                assert written + more == [event.seq for event in await log.read(A)]
            cur = await conn.execute("SELECT value FROM eventlog_meta")
            assert [(str(sql.STORE_VERSION),)] == await cur.fetchall()
            assert [] == await foreign_keys(conn)

    async def test_version_2_is_migrated_with_tokens_backfilled(
        self, pg_dsn: str, clock: FakeClock
    ) -> None:
        """A version 2 schema gets the token columns, filled from each session's latest
        checkpoint (an omitted cached count is 0); the next checkpoint updates them."""
        b = SessionKey("app", "ops", "b")
        async with PostgresEventLog(pg_dsn, clock=clock) as log:
            await log.append([Event.create(A, Checkpoint(1, 900, 1, 0.0, "go"))])
            await log.append(
                [
                    Event.create(
                        A, Checkpoint(2, 12_400, 1, 0.0, "go", cached_input_tokens=11_904)
                    ),
                    Event.create(b, Checkpoint(1, 700, 1, 0.0, "go")),
                ]
            )
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(DROP_TOKENS)
            await conn.execute("UPDATE eventlog_meta SET value = '2'")
            async with PostgresEventLog(pg_dsn, clock=clock) as log:
                listed = {
                    s.key: (s.input_tokens, s.cached_input_tokens) for s in await log.sessions()
                }
                assert {A: (12_400, 11_904), b: (700, 0)} == listed
                await log.append(
                    [Event.create(b, Checkpoint(2, 1_500, 1, 0.0, "go", cached_input_tokens=800))]
                )
                listed = {
                    s.key: (s.input_tokens, s.cached_input_tokens) for s in await log.sessions()
                }
                assert (1_500, 800) == listed[b]
            cur = await conn.execute("SELECT value FROM eventlog_meta")
            assert [(str(sql.STORE_VERSION),)] == await cur.fetchall()

    async def test_an_unreadable_checkpoint_leaves_the_tokens_at_0(
        self, pg_dsn: str, clock: FakeClock
    ) -> None:
        """A latest checkpoint row that is not JSON does not make the schema unopenable: the
        migration goes through, the tokens show 0 until the next checkpoint."""
        async with PostgresEventLog(pg_dsn, clock=clock) as log:
            await log.append([Event.create(A, Checkpoint(1, 900, 1, 0.0, "go"))])
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(DROP_TOKENS)
            await conn.execute("UPDATE eventlog_events SET payload = '{not json'")
            await conn.execute("UPDATE eventlog_meta SET value = '2'")
            async with PostgresEventLog(pg_dsn, clock=clock) as log:
                assert [(0, 0)] == [
                    (s.input_tokens, s.cached_input_tokens) for s in await log.sessions()
                ]

    async def test_one_unreadable_checkpoint_leaves_the_other_sessions_backfilled(
        self, pg_dsn: str, clock: FakeClock
    ) -> None:
        """Only the session whose latest checkpoint row is not JSON stays at 0 (as SQLite's
        migration leaves it): the others' tokens are filled in all the same."""
        b = SessionKey("app", "ops", "b")
        async with PostgresEventLog(pg_dsn, clock=clock) as log:
            await log.append([Event.create(A, Checkpoint(1, 900, 1, 0.0, "go"))])
            await log.append(
                [Event.create(b, Checkpoint(1, 700, 1, 0.0, "go", cached_input_tokens=600))]
            )
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(DROP_TOKENS)
            await conn.execute(
                "UPDATE eventlog_events SET payload = '{not json' WHERE sid ="
                " (SELECT sid FROM eventlog_sessions WHERE session_id = 'a')"
            )
            await conn.execute("UPDATE eventlog_meta SET value = '2'")
            async with PostgresEventLog(pg_dsn, clock=clock) as log:
                listed = {
                    s.key: (s.input_tokens, s.cached_input_tokens) for s in await log.sessions()
                }
        assert {A: (0, 0), b: (700, 600)} == listed

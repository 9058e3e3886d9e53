"""API tokens in the log, as every store keeps them: created once by name, listed, revoked,
found by their secret's digest; the secret itself never stored."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from eventlog import (
    EventLog,
    EventLogError,
    MemoryEventLog,
    SqliteEventLog,
    StoreUnavailable,
    TokenExists,
    TokenRecord,
    UnknownToken,
)
from eventlog._sqlite._schema import STORE_VERSION
from tests.eventlog.conftest import FakeClock

pytestmark = pytest.mark.anyio


def digest_of(secret: str) -> str:
    """The SHA-256 hex digest of ``secret``."""
    return hashlib.sha256(secret.encode()).hexdigest()


def token(called: str, clock: FakeClock, **changes: Any) -> TokenRecord:
    """A token named ``called`` made at the clock's time, its secret ``secret-<called>``."""
    return TokenRecord(
        **{
            "name": called,
            "scope": "viewer",
            "digest": digest_of(f"secret-{called}"),
            "created_at": clock.now,
            **changes,
        }
    )


class TestTokenRecord:
    """The value: checked when made, its digest out of its repr."""

    @pytest.mark.parametrize(
        "changes",
        [{"name": ""}, {"name": "  "}, {"scope": ""}, {"app": ""}, {"name": "x" * 201}],
        ids=["empty-name", "blank-name", "empty-scope", "empty-app", "long-name"],
    )
    def test_blank_or_long_text_is_refused(self, clock: FakeClock, changes: Any) -> None:
        """A blank name, scope or app, or a name longer than a key part, is a ValueError."""
        with pytest.raises(ValueError, match="token's"):
            token("t", clock, **changes)

    @pytest.mark.parametrize("digest", ["", "abc", "A" * 64, "secret-t"])
    def test_a_digest_must_be_sha256_hex(self, clock: FakeClock, digest: str) -> None:
        """Anything but 64 lowercase hex digits is refused (a secret passed by mistake too)."""
        with pytest.raises(ValueError, match="64 lowercase hex"):
            token("t", clock, digest=digest)

    def test_the_digest_is_not_in_the_repr(self, clock: FakeClock) -> None:
        """repr shows the name and scope, never the digest."""
        record = token("ci", clock)
        assert "ci" in repr(record)
        assert record.digest not in repr(record)

    def test_status(self, clock: FakeClock) -> None:
        """Active until it expires (at its expiry, it has) or is revoked; revoked wins."""
        later = clock.now + timedelta(hours=1)
        record = token("t", clock, expires_at=later)
        assert ["active", "expired", "expired"] == [
            record.status(clock.now),
            record.status(later),
            record.status(later + timedelta(seconds=1)),
        ]
        revoked = attrs.evolve(record, revoked_at=clock.now)
        assert ("revoked", False) == (revoked.status(clock.now), revoked.active(clock.now))
        assert token("t", clock).active(clock.now + timedelta(days=10_000))


class TestTokens:
    """create_token, tokens, revoke_token and token_by_digest on each store."""

    async def test_a_created_token_is_listed_and_found_by_digest(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """What was created comes back whole from the listing and the digest lookup."""
        record = token(
            "deploy-bot",
            clock,
            scope="operator",
            app="billing",
            expires_at=clock.now + timedelta(days=30),
        )
        await store.create_token(record)
        assert [record] == await store.tokens()
        assert record == await store.token_by_digest(record.digest)

    async def test_an_unknown_digest_is_none(self, store: EventLog, clock: FakeClock) -> None:
        """A digest no token has finds nothing."""
        await store.create_token(token("a", clock))
        assert None is await store.token_by_digest(digest_of("not a secret of ours"))

    async def test_listed_oldest_first(self, store: EventLog, clock: FakeClock) -> None:
        """Tokens are listed in the order they were made, whatever their names."""
        for name in ("zeta", "alpha", "mid"):
            await store.create_token(token(name, clock))
            clock.advance(1)
        assert ["zeta", "alpha", "mid"] == [t.name for t in await store.tokens()]

    async def test_a_name_is_never_reused(self, store: EventLog, clock: FakeClock) -> None:
        """A second token of a name is refused, the first one kept, even once revoked."""
        first = token("ci", clock)
        await store.create_token(first)
        with pytest.raises(TokenExists, match="'ci' exists already") as caught:
            await store.create_token(token("ci", clock, digest=digest_of("other")))
        assert ("ci", True) == (caught.value.name, isinstance(caught.value, EventLogError))
        await store.revoke_token("ci")
        with pytest.raises(TokenExists):
            await store.create_token(token("ci", clock, digest=digest_of("third")))
        assert [first.digest] == [t.digest for t in await store.tokens()]
        assert None is await store.token_by_digest(digest_of("other"))

    async def test_a_secret_is_never_reused(self, store: EventLog, clock: FakeClock) -> None:
        """A new token with another token's digest is refused, saying so."""
        await store.create_token(token("a", clock))
        with pytest.raises(TokenExists, match="secret is another token's"):
            await store.create_token(token("b", clock, digest=digest_of("secret-a")))
        assert ["a"] == [t.name for t in await store.tokens()]

    async def test_revoke_stamps_the_time_once(self, store: EventLog, clock: FakeClock) -> None:
        """Revoking sets revoked_at to the store's clock; revoking again keeps that time."""
        await store.create_token(token("a", clock))
        await store.create_token(token("b", clock, digest=digest_of("b")))
        clock.advance(60)
        revoked = await store.revoke_token("a")
        clock.advance(60)
        again = await store.revoke_token("a")
        expected = clock.now - timedelta(seconds=60)
        assert (expected, expected) == (revoked.revoked_at, again.revoked_at)
        found = await store.token_by_digest(digest_of("secret-a"))
        assert found is not None and expected == found.revoked_at
        assert [expected, None] == [t.revoked_at for t in await store.tokens()]

    async def test_revoking_an_unknown_name_is_an_error(
        self, store: EventLog, clock: FakeClock
    ) -> None:
        """An unknown name raises UnknownToken (a LookupError) naming it."""
        await store.create_token(token("a", clock))
        with pytest.raises(UnknownToken, match="'nobody'") as caught:
            await store.revoke_token("nobody")
        assert isinstance(caught.value, LookupError)

    async def test_any_text_round_trips(self, store: EventLog, clock: FakeClock) -> None:
        """Names and apps with unicode, quotes and NUL come back as they went in."""
        record = token("bot 'ü' \x00 \x10", clock, app="app\x00/x")
        await store.create_token(record)
        assert [record] == await store.tokens()
        revoked = await store.revoke_token(record.name)
        assert attrs.evolve(record, revoked_at=clock.now) == revoked
        assert revoked == await store.token_by_digest(record.digest)

    async def test_a_closed_store_refuses(self, store: EventLog, clock: FakeClock) -> None:
        """Every token call on a closed store raises StoreUnavailable."""
        await store.aclose()
        with pytest.raises(StoreUnavailable):
            await store.create_token(token("a", clock))
        with pytest.raises(StoreUnavailable):
            await store.tokens()


class TestProtocolOwn:
    """A store of a user's that keeps no tokens: the protocol's members say so clearly."""

    async def test_a_store_without_tokens_raises_not_implemented(self, clock: FakeClock) -> None:
        """The protocol's own token members raise NotImplementedError naming the store."""

        class NoTokens(MemoryEventLog):
            pass

        log = NoTokens(clock=clock)
        calls = [
            EventLog.create_token(log, token("a", clock)),
            EventLog.tokens(log),
            EventLog.revoke_token(log, "a"),
            EventLog.token_by_digest(log, digest_of("x")),
        ]
        for call in calls:
            with pytest.raises(NotImplementedError, match="NoTokens keeps no API tokens"):
                await call


class TestSqliteStorage:
    """What the SQLite file holds: the digest, never a secret; the table made by migration."""

    async def test_the_file_holds_the_digest_not_the_secret(
        self, db_path: Path, clock: FakeClock
    ) -> None:
        """No byte of the secret is in the file; its digest is."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            await log.create_token(token("a", clock))
        raw = b"".join(p.read_bytes() for p in db_path.parent.glob("events.db*"))
        assert b"secret-a" not in raw
        assert digest_of("secret-a").encode() in raw

    async def test_a_version_5_file_gets_the_tokens_table(
        self, db_path: Path, clock: FakeClock
    ) -> None:
        """A version 5 file (no tokens table) is migrated to the current version when opened:
        its sessions kept, tokens then work."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            pass
        with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
            conn.execute("DROP TABLE tokens")
            conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        async with SqliteEventLog(db_path, clock=clock) as log:
            assert [] == await log.tokens()
            await log.create_token(token("a", clock))
            assert ["a"] == [t.name for t in await log.tokens()]
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert [(str(STORE_VERSION),)] == conn.execute("SELECT value FROM meta").fetchall()
        assert 6 == STORE_VERSION


@pytest.mark.postgres
class TestPostgresStorage:
    """The PostgreSQL schema's tokens table, made by migration for an older schema."""

    async def test_a_version_3_schema_gets_the_tokens_table(
        self, pg_dsn: str, clock: FakeClock
    ) -> None:
        """A version 3 schema (no tokens table) is migrated to the current version when
        opened; tokens then work, and the table holds the digest, not the secret."""
        import psycopg

        from eventlog import PostgresEventLog
        from eventlog._postgres import _sql as pgsql

        async with PostgresEventLog(pg_dsn, clock=clock) as log:
            await log.open()
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute("DROP TABLE eventlog_tokens")
            await conn.execute("UPDATE eventlog_meta SET value = '3'")
            async with PostgresEventLog(pg_dsn, clock=clock) as log:
                assert [] == await log.tokens()
                await log.create_token(token("a", clock))
            cur = await conn.execute("SELECT value FROM eventlog_meta")
            assert [(str(pgsql.STORE_VERSION),)] == await cur.fetchall()
            cur = await conn.execute("SELECT name, digest FROM eventlog_tokens")
            assert [("a", digest_of("secret-a"))] == await cur.fetchall()
        assert 4 == pgsql.STORE_VERSION

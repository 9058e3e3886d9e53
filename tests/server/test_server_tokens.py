"""token_auth: a request's bearer secret checked against the log's tokens, the secret itself
never in a log line, an error or a traceback."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import traceback
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog
from starlette.requests import Request

from autonomous.server import Principal, Scope, token_auth
from autonomous.server._tokens import PREFIX, digest, new_secret
from eventlog import (
    EventLog,
    MemoryEventLog,
    PostgresEventLog,
    SqliteEventLog,
    StoreUnavailable,
    TokenRecord,
)

pytestmark = pytest.mark.anyio

START = datetime(2030, 1, 1, tzinfo=UTC)


class Clock:
    """A settable UTC clock for the store and the check."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def anyio_backend() -> str:
    """aiosqlite needs asyncio."""
    return "asyncio"


@pytest.fixture
def clock() -> Clock:
    """The test's clock."""
    return Clock()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def log(
    request: pytest.FixtureRequest, tmp_path: Path, clock: Clock
) -> AsyncIterator[EventLog]:
    """Each store in turn, open, on the test's clock."""
    store: MemoryEventLog | SqliteEventLog | PostgresEventLog
    if request.param == "memory":
        store = MemoryEventLog(clock=clock)
    elif request.param == "sqlite":
        store = SqliteEventLog(tmp_path / "events.db", clock=clock)
    else:
        store = PostgresEventLog(request.getfixturevalue("pg_dsn"), clock=clock, max_size=2)
    async with store:
        yield store


def bearer(header: str | None) -> Request:
    """A request with this Authorization header (none: None)."""
    headers = [] if header is None else [(b"authorization", header.encode("latin-1"))]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers})


async def add(
    log: EventLog,
    clock: Clock,
    name: str,
    scope: str = "operator",
    *,
    app: str | None = None,
    expires_in: float | None = None,
) -> str:
    """A token kept by ``log``; its secret."""
    secret = new_secret()
    expires = None if expires_in is None else clock.now + timedelta(seconds=expires_in)
    record = TokenRecord(name, scope, digest(secret), clock.now, app=app, expires_at=expires)
    await log.create_token(record)
    return secret


class TestSecrets:
    def test_a_secret_is_prefixed_random_and_url_safe(self) -> None:
        """ba_ and 43 URL-safe characters (256 bits), never the same twice."""
        made = {new_secret() for _ in range(100)}
        assert 100 == len(made)
        assert all(re.fullmatch(r"ba_[A-Za-z0-9_-]{43}", s) for s in made), made
        assert "ba_" == PREFIX

    def test_the_digest_is_sha256_hex(self) -> None:
        """The digest is SHA-256 of the UTF-8 secret, lowercase hex."""
        assert hashlib.sha256(b"ba_x").hexdigest() == digest("ba_x")


class TestTokenAuth:
    async def test_a_good_token_is_its_principal(self, log: EventLog, clock: Clock) -> None:
        """The bearer of an active token is its name, scope and app."""
        secret = await add(log, clock, "deploy", "operator", app="billing")
        auth = token_auth(log, now=clock)
        assert Principal("deploy", Scope.OPERATOR, "billing") == await auth(
            bearer(f"Bearer {secret}")
        )

    @pytest.mark.parametrize("scope", list(Scope))
    async def test_every_scope(self, log: EventLog, clock: Clock, scope: Scope) -> None:
        """Each scope comes back as the Scope it names, for every app (None)."""
        secret = await add(log, clock, "t", str(scope))
        assert Principal("t", scope, None) == await token_auth(log, now=clock)(
            bearer(f"bearer  {secret} ")
        )

    @pytest.mark.parametrize(
        "header",
        [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Bearer ba_unknown", "Token x"],
    )
    async def test_no_or_an_unknown_secret_is_none(
        self, log: EventLog, clock: Clock, header: str | None
    ) -> None:
        """No header, another scheme, or a secret of no token: None (401)."""
        await add(log, clock, "t")
        assert None is await token_auth(log, now=clock)(bearer(header))

    async def test_a_revoked_token_is_none_at_once(self, log: EventLog, clock: Clock) -> None:
        """Revoking takes effect on the next request (nothing cached)."""
        secret = await add(log, clock, "t")
        auth = token_auth(log, now=clock)
        assert await auth(bearer(f"Bearer {secret}")) is not None
        await log.revoke_token("t")
        assert None is await auth(bearer(f"Bearer {secret}"))

    async def test_an_expired_token_is_none(self, log: EventLog, clock: Clock) -> None:
        """A token is good until its expiry, not at it."""
        secret = await add(log, clock, "t", expires_in=60)
        auth = token_auth(log, now=clock)
        clock.now += timedelta(seconds=59)
        assert await auth(bearer(f"Bearer {secret}")) is not None
        clock.now += timedelta(seconds=1)
        assert None is await auth(bearer(f"Bearer {secret}"))

    async def test_a_scope_this_server_does_not_know_is_none(
        self, log: EventLog, clock: Clock
    ) -> None:
        """A token whose scope is not viewer, operator or admin proves nothing."""
        secret = await add(log, clock, "t", "superuser")
        assert None is await token_auth(log, now=clock)(bearer(f"Bearer {secret}"))

    async def test_another_tokens_prefix_or_extension_is_none(
        self, log: EventLog, clock: Clock
    ) -> None:
        """Only the whole secret is good: a prefix of it, or it with more, is not."""
        secret = await add(log, clock, "t")
        auth = token_auth(log, now=clock)
        assert None is await auth(bearer(f"Bearer {secret[:-1]}"))
        assert None is await auth(bearer(f"Bearer {secret}x"))


class _Failing(MemoryEventLog):
    """A store whose token lookup fails."""

    async def token_by_digest(self, digest: str) -> TokenRecord | None:
        raise StoreUnavailable("event log down: cannot find a token", transient=True)


class TestSecretNeverShown:
    async def test_no_log_line_holds_a_secret(
        self, log: EventLog, clock: Clock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A good, a bad, a revoked and an expired token used: no log line, structured or
        standard, holds any of their secrets (the names may be there)."""
        good = await add(log, clock, "good")
        revoked = await add(log, clock, "revoked")
        expired = await add(log, clock, "expired", expires_in=1)
        await log.revoke_token("revoked")
        clock.now += timedelta(seconds=5)
        bad = new_secret()
        auth = token_auth(log, now=clock)
        caplog.set_level(logging.DEBUG)
        with structlog.testing.capture_logs() as captured:
            for secret in (good, bad, revoked, expired):
                await auth(bearer(f"Bearer {secret}"))
        text = repr(captured) + caplog.text
        assert "token_refused" in text  # the refusals were logged
        assert [] == [s for s in (good, bad, revoked, expired) if s in text]
        assert [] == [s for s in (good, bad, revoked, expired) if digest(s) in text]

    async def test_no_error_or_traceback_holds_the_secret(self, clock: Clock) -> None:
        """A store failing under a request: its error, the formatted traceback and the
        traceback with every frame's locals (as structlog can render it) hold no secret."""
        secret = new_secret()
        auth = token_auth(_Failing(clock=clock), now=clock)
        with pytest.raises(StoreUnavailable) as caught:
            await auth(bearer(f"Bearer {secret}"))
        formatted = "".join(traceback.format_exception(caught.value))
        trace = structlog.tracebacks.extract(
            type(caught.value), caught.value, caught.value.__traceback__, show_locals=True
        )
        # the library's frames (this test's own frame holds the secret, of course)
        ours = [f for f in trace.stacks[0].frames if f"{os.sep}autonomous{os.sep}" in f.filename]
        with_locals = repr(ours)
        assert "token_by_digest" in formatted  # the traceback is the real one
        assert ["authenticate"] == [f.name for f in ours]
        assert "wanted" in with_locals  # its locals are shown (the digest, not the secret)
        assert [] == [t for t in (str(caught.value), formatted, with_locals) if secret in t]

    async def test_no_repr_holds_the_secret_or_its_digest(
        self, log: EventLog, clock: Clock
    ) -> None:
        """The principal and the token record kept show neither the secret nor its digest."""
        secret = await add(log, clock, "t")
        principal = await token_auth(log, now=clock)(bearer(f"Bearer {secret}"))
        (record,) = await log.tokens()
        shown = repr(principal) + repr(record) + str(record)
        assert [] == [s for s in (secret, digest(secret)) if s in shown]

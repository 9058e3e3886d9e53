"""A store written to the EventLog protocol before its token members joined it still runs
sessions and a daemon: the tokens are the HTTP API's, never a run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autonomous import Agent, StopReason, run_autonomous
from autonomous.fleet import Daemon
from autonomous.testing import ScriptedModel, done
from eventlog import EventLog, SessionRef, SqliteEventLog
from tests.autonomous.helpers import builder

pytestmark = pytest.mark.anyio

#: The members that joined the protocol with the HTTP API's tokens.
TOKEN_MEMBERS = ("create_token", "tokens", "revoke_token", "token_by_digest")


@pytest.fixture
def anyio_backend() -> str:
    """aiosqlite needs asyncio."""
    return "asyncio"


class WithoutTokens:
    """A store of a user's: every member of the protocol but the token ones (not a subclass)."""

    durable = True

    def __init__(self, inner: SqliteEventLog) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in TOKEN_MEMBERS:
            raise AttributeError(name)
        return getattr(self.inner, name)


class TestWithoutTokens:
    async def test_a_run_on_it_completes(self, tmp_path: Path) -> None:
        """A durable run on a store without the token members completes as before."""
        async with SqliteEventLog(tmp_path / "runs.db") as inner:
            log: Any = WithoutTokens(inner)
            assert not isinstance(log, EventLog)
            result = await run_autonomous(
                builder(ScriptedModel([done("ok")]), session=SessionRef(log, "a", "u", "s")), "go"
            )
            assert StopReason.COMPLETED == result.reason

    async def test_a_daemon_takes_it(self, tmp_path: Path) -> None:
        """The Daemon accepts it as an event log (its tokens are never asked for)."""
        async with SqliteEventLog(tmp_path / "runs.db") as inner:
            log: Any = WithoutTokens(inner)

            def build(extra: list[Any], session_id: str = "s") -> Agent:
                ref = SessionRef(log, "a", "u", session_id)
                return Agent(ScriptedModel([]), instructions="w", tools=extra, session=ref)

            Daemon(log, build)

"""A real uvicorn server on 127.0.0.1 (port 0) in the test's event loop, over a log with
sessions made by real runs, and principals known by their bearer secrets."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from starlette.requests import Request

from autonomous import Agent, function_tool, run_autonomous
from autonomous.server import Principal, Scope, bearer_secret, create_app
from autonomous.testing import ScriptedModel, call, done, reply
from eventlog import EventLog, SessionRef, SqliteEventLog
from scheduler import ExitOnDeferScheduler

from ..support.litellm_http import wait_until

#: The principals of the tests, by their bearer secret.
PRINCIPALS = {
    "viewer-secret": Principal("vera", Scope.VIEWER),
    "operator-secret": Principal("otto", Scope.OPERATOR),
    "admin-secret": Principal("ada", Scope.ADMIN),
    "limited-secret": Principal("lim", Scope.OPERATOR, app="other"),
    "handle-secret": Principal("handle", Scope.OPERATOR),
}
#: The bearer header of each scope's principal (and of the app-limited one).
VIEWER = {"Authorization": "Bearer viewer-secret"}
OPERATOR = {"Authorization": "Bearer operator-secret"}
ADMIN = {"Authorization": "Bearer admin-secret"}
LIMITED = {"Authorization": "Bearer limited-secret"}


async def dict_auth(request: Request) -> Principal | None:
    """The tests' auth hook: a principal by its secret (None: 401)."""
    return PRINCIPALS.get(bearer_secret(request) or "")


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the test runner keeps its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(log: EventLog, **options: Any) -> AsyncIterator[str]:
    """Serve ``create_app(log, auth=dict_auth, **options)`` on 127.0.0.1 and a free port, in
    this event loop; yields the base URL."""
    options.setdefault("auth", dict_auth)
    app = create_app(log, **options)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
        timeout_graceful_shutdown=1,
    )  # fmt: skip
    server = _Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        await wait_until(lambda: server.started, within=10)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


def path_of(ref: SessionRef) -> str:
    """A session's route, each segment percent-encoded."""
    from urllib.parse import quote

    return "/v1/sessions/" + "/".join(
        quote(part, safe="") for part in (ref.app, ref.user, ref.session_id)
    )


async def completed_session(log: EventLog, app: str, user: str, session_id: str) -> SessionRef:
    """A session run to completion (two turns) by a scripted model."""
    ref = SessionRef(log, app, user, session_id)
    model = ScriptedModel([call("note", {"text": "secret words"}), done("all fine")])

    def note(text: str) -> str:
        """Note something."""
        return f"noted {text}"

    tool = function_tool(note)
    await run_autonomous(lambda extra: Agent(model, tools=[tool, *extra], session=ref), "go")
    return ref


async def deferred_session(log: EventLog, app: str, user: str, session_id: str) -> SessionRef:
    """A session that deferred itself for an hour (a daemon would resume it)."""
    ref = SessionRef(log, app, user, session_id)
    wait = call("schedule_next_turn", {"wake_in_sec": 3600, "next_prompt": "again"})
    model = ScriptedModel([wait, reply("sleeping")])
    await run_autonomous(
        lambda extra: Agent(model, tools=extra, session=ref), "watch",
        scheduler=ExitOnDeferScheduler(),
    )  # fmt: skip
    return ref


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SqliteEventLog]:
    """A fresh SQLite log."""
    async with SqliteEventLog(tmp_path / "log.db") as opened:
        yield opened


@pytest.fixture
async def sessions(log: SqliteEventLog) -> Mapping[str, SessionRef]:
    """Three sessions made by real runs: two completed ones of app ``monitor`` (one with a key
    that needs encoding) and a deferred one of app ``other``."""
    return {
        "done": await completed_session(log, "monitor", "ops", "disk-1"),
        "odd": await completed_session(log, "monitor", "é ü", "a/b %2F?#"),
        "deferred": await deferred_session(log, "other", "ops", "db-1"),
    }


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client (the base URL is given per request)."""
    async with httpx.AsyncClient(timeout=10) as opened:
        yield opened

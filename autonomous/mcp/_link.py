"""One connected MCP server: the task that keeps its session, calls, restarts, list changes.

The SDK's sessions hold task groups, which anyio requires to be left in the task that entered
them: so each server's session lives in a keeper task of its own (in the run's task group for
MCP), never in the tool call that happens to need it. A call talks to the session from the
run's task; when it finds the server gone it asks the keeper to start it again, once, and waits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import anyio.abc
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from structlog.typing import FilteringBoundLogger

from scheduler import Clock, SystemClock

from .._errors import MCPServerError
from .._observe._telemetry import trace_context
from .._tools._tool_result import ToolInterrupted
from ._server import MCPServer
from ._transport import WatchedStream, connect

#: Seconds a server has to list its tools again after it said they changed.
_LIST_TIMEOUT = 30.0
_MAX_PAGES = 100
_CLIENT_INFO = types.Implementation(name="bounded-autonomous", version="0.1.0")
#: What a transport raises for a connection that broke under a request.
_BROKEN = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


class ServerDown(Exception):
    """The server is not running and did not start again: the call's answer is this error."""


class Link:
    """One server of the run: its tools as last listed, its session (kept by :meth:`keep`).

    ``clock`` is the run's: a start (or a start again) gets the server's ``connect_timeout``
    on it, or ``time_left()`` seconds when that says less (what the run's ``max_wallclock``
    leaves; None: no budget).
    """

    def __init__(
        self,
        server: MCPServer,
        log: FilteringBoundLogger,
        *,
        clock: Clock | None = None,
        time_left: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.server = server
        self.log = log
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._time_left = time_left
        self.tools: tuple[types.Tool, ...] = ()
        #: The server said its tools changed: list them again before the next model call.
        self.stale = False
        #: The tools were listed anew since the table last took them.
        self.fresh = False
        self._client: Client | None = None
        self._stream: WatchedStream | None = None
        self._lost = False  # a call found the connection broken
        self._started = False
        self._failure = ""
        self._asked: anyio.Event | None = None
        self._ask, self._asks = anyio.create_memory_object_stream[anyio.Event](1)

    @property
    def up(self) -> bool:
        """Whether the session is open and its server still there, as far as is known."""
        stream = self._stream
        return self._client is not None and not self._lost and not (stream and stream.ended)

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the keeper in ``tg``; returns once the server has listed its tools.

        Raises:
            MCPServerError: the server could not be started or did not answer in time.
        """
        await tg.start(self._keep)

    def close(self) -> None:
        """Release what the link holds once its keeper has ended."""
        self._ask.close()
        self._asks.close()

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call tool ``name`` with the current span's trace context in ``_meta``.

        A server found gone before the call is started again first (once); one that goes
        away during the call makes it :class:`ToolInterrupted` (it is never sent again).
        """
        client = self._client if self.up else await self._restart()
        assert client is not None
        meta = trace_context()
        try:
            return await client.call_tool(
                name, arguments, meta=cast(types.RequestParamsMeta, meta) if meta else None
            )
        except MCPError as exc:
            if exc.code != types.CONNECTION_CLOSED:
                raise
            raise self._broken() from exc
        except (*_BROKEN, httpx2.TransportError) as exc:
            raise self._broken() from exc

    async def relist(self) -> None:
        """List the tools again (the server said they changed); a failure keeps the old list
        and tries again before the next model call."""
        client = self._client
        if client is None or not self.up:
            return  # the next call starts it again, and lists them then
        self.stale = False
        try:
            with anyio.fail_after(_LIST_TIMEOUT):
                tools = await _list_all(client)
        except Exception as exc:
            self.stale = True
            self.log.warning("mcp_list_failed", server=self.server.name, error=reason(exc))
            return
        self.tools, self.fresh = tools, True

    def _broken(self) -> ToolInterrupted:
        self._lost = True
        self.log.warning("mcp_server_lost", server=self.server.name)
        return ToolInterrupted(f"the MCP server {self.server.name} went away during the call")

    async def _restart(self) -> Client:
        """Have the keeper start the server again and wait for it; the new session."""
        done = anyio.Event()
        await self._ask.send(done)
        await done.wait()
        if self._client is None or not self.up:
            raise ServerDown(
                f"the MCP server {self.server.name} is not running and did not start again: "
                f"{self._failure or 'it went away'}"
            )
        return self._client

    async def _keep(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep a session open; start it again each time a call asks for that."""
        ready: Callable[[], None] = task_status.started
        done: anyio.Event | None = None
        while True:
            try:
                await self._session(ready)
            except Exception as exc:
                if not self._started:  # the run's start fails with it (task_status not called)
                    raise self._start_error(exc) from exc
                self._failure = reason(exc)
                self.log.warning("mcp_server_down", server=self.server.name, error=reason(exc))
            if done is not None:
                done.set()  # a restart that failed is answered too: the caller reads _client
            done = self._asked or await self._asks.receive()
            self._asked = None
            ready = done.set

    async def _session(self, ready: Callable[[], None]) -> None:
        """Connect, list the tools, listen for list changes (a 2026 connection; older ones
        send notifications), say ``ready``, then serve until a call asks for a restart (kept
        in ``_asked``). The first three must be done within :meth:`_connect_bound`."""
        limit, bound = self._connect_bound()
        connected = anyio.Event()
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as guard:
                guard.start_soon(self._cut_off, scope, connected, limit)
                client = Client(
                    self._transport(),
                    mode="auto",
                    cache=None,
                    message_handler=self._on_message,
                    client_info=_CLIENT_INFO,
                )
                async with client, anyio.create_task_group() as tg:
                    tools = await _list_all(client)
                    if _can_listen(client):
                        await tg.start(self._listen, client)
                    connected.set()
                    self.tools, self.fresh, self.stale = tools, True, False
                    self._client, self._lost, self._started = client, False, True
                    self._failure = ""
                    ready()
                    try:
                        self._asked = await self._asks.receive()
                    finally:
                        self._client = None
                        tg.cancel_scope.cancel()
        if scope.cancelled_caught:
            raise TimeoutError(f"it did not answer within {limit:g} s ({bound})")

    def _connect_bound(self) -> tuple[float, str]:
        """The seconds a start has, and what sets them: the server's ``connect_timeout``, or
        the run's ``max_wallclock`` when less of it is left."""
        limit, bound = self.server.connect_timeout, "connect_timeout"
        left = self._time_left()
        if left is not None and left < limit:
            limit, bound = max(left, 0.0), "the run's max_wallclock"
        return limit, bound

    async def _cut_off(
        self, session: anyio.CancelScope, connected: anyio.Event, limit: float
    ) -> None:
        """Cancel ``session`` unless ``connected`` comes within ``limit`` seconds on the run's
        clock (a task, not a deadline: the clock may be a test's fake one)."""
        with self._clock.move_on_after(limit) as waiting:
            await connected.wait()
        if waiting.cancelled_caught:
            session.cancel()

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[WatchedStream, Any]]:
        async with connect(self.server) as (read, write):
            self._stream = read
            yield read, write

    async def _listen(
        self, client: Client, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Mark the tools stale at each change the server reports; started once the server
        acknowledged the subscription (or refused it: then changes are not heard)."""
        started = False
        try:
            async with client.listen(tools_list_changed=True) as events:
                task_status.started()
                started = True
                async for _event in events:
                    self.stale = True
        except Exception as exc:
            self.log.debug("mcp_listen_ended", server=self.server.name, error=reason(exc))
        if not started:
            task_status.started()

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.stale = True
        elif isinstance(message, Exception):
            self.log.debug("mcp_transport_error", server=self.server.name, error=reason(message))

    def _start_error(self, exc: Exception) -> MCPServerError:
        server = self.server
        where = f"command {server.command!r}" if server.kind == "stdio" else f"URL {server.url}"
        return MCPServerError(
            f"MCP server {server.name!r} ({where}) could not be started: {reason(exc)}",
            server=server.name,
        )


def _can_listen(client: Client) -> bool:
    """Whether the server sends list changes on a ``subscriptions/listen`` stream."""
    tools = client.server_capabilities.tools
    modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
    return modern and tools is not None and bool(tools.list_changed)


async def _list_all(client: Client) -> tuple[types.Tool, ...]:
    """Every tool of the server, page by page."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tuple(tools)


def reason(exc: BaseException) -> str:
    """``"<Type>: <message>"`` of ``exc``, or of the first error inside an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

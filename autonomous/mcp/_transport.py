"""The SDK's transports for one :class:`MCPServer`: its stderr to the log, and a watch on the
stream it answers on, so a run knows a server that went away before it sends it a call."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self

import anyio
import httpx2
from mcp import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from .._logging import get_logger
from ._server import MCPServer

_log = get_logger("autonomous.mcp")
#: Seconds to connect, write or wait for a pooled connection; reads wait as long as the run's
#: own timeouts let them (a tool call may take minutes). A server's longer connect_timeout
#: lengthens the connect's (its start is bounded by that, on the run's clock).
_HTTP_TIMEOUT = 30.0

Item = SessionMessage | Exception


class WatchedStream:
    """The stream a server's messages arrive on, which remembers that it ended."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.ended = False

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the HTTP transport's streams have it)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Item:
        """The next message; marks the stream ended when there is none to come."""
        try:
            item: Item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.ended = True
            raise
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Item:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Close the stream."""
        self.ended = True
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def connect(server: MCPServer) -> AsyncIterator[tuple[WatchedStream, Any]]:
    """The server's streams (the one it answers on watched), open while the block runs."""
    if server.kind == "http":
        async with (
            httpx2.AsyncClient(
                headers=dict(server.headers or {}), timeout=_http_timeout(server)
            ) as http,
            streamable_http_client(server.url, http_client=http) as (read, write),
        ):
            yield WatchedStream(read), write
        return
    params = StdioServerParameters(
        command=server.command,
        args=list(server.args),
        env=dict(server.env) if server.env is not None else None,
        cwd=server.cwd,
    )
    errlog = _stderr_to_log(server.name)
    try:
        async with stdio_client(params, errlog=errlog) as (read, write):
            errlog.close()  # the server has its own copy; the reader sees the end with it
            yield WatchedStream(read), write
    finally:
        errlog.close()


def _http_timeout(server: MCPServer) -> httpx2.Timeout:
    """The HTTP client's timeouts for ``server`` (see :data:`_HTTP_TIMEOUT`)."""
    connect = max(_HTTP_TIMEOUT, server.connect_timeout)
    return httpx2.Timeout(_HTTP_TIMEOUT, connect=connect, read=None)


def _stderr_to_log(name: str) -> Any:
    """A file for the server's stderr whose lines go to the log at debug, from a thread that
    ends when the last copy of the file is closed (the server has exited)."""
    read_fd, write_fd = os.pipe()
    thread = threading.Thread(
        target=_forward, args=(read_fd, name), name=f"mcp-stderr-{name}", daemon=True
    )
    thread.start()
    return os.fdopen(write_fd, "w")


def _forward(read_fd: int, name: str) -> None:
    with os.fdopen(read_fd, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            _log.debug("mcp_server_stderr", server=name, line=line.rstrip("\n"))

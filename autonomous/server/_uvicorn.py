"""Serving the app with uvicorn inside a caller's event loop, until the caller cancels.

uvicorn normally owns the process: it installs signal handlers and exits on SIGINT. Here the
caller (the ``serve`` command, a test) keeps its own handlers and stops the server by
cancelling; the server then shuts down gracefully, shielded, so open requests and streams end
rather than being cut.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import anyio
import uvicorn
from starlette.types import ASGIApp


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the caller keeps its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_until_cancelled(
    app: ASGIApp, listening: socket.socket, *, graceful: int = 5
) -> None:
    """Serve ``app`` on the ``listening`` socket until cancelled; then stop taking requests,
    give open ones ``graceful`` seconds, and return."""
    server = _Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=graceful)
    )
    done = anyio.Event()

    async def run() -> None:
        try:
            with anyio.CancelScope(shield=True):  # stopped by should_exit, never cut
                await server.serve(sockets=[listening])
        finally:
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            await done.wait()
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True):
                await done.wait()

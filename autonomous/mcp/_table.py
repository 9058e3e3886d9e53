"""MCPToolTable: the run's tools, the agent's own and those of its MCP servers, named apart."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from structlog.typing import FilteringBoundLogger

from scheduler import Clock

from .._errors import ConfigurationError
from .._tools._tools import Tool
from ._content import result_text
from ._link import Link, reason
from ._server import MCPServer

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


class MCPToolTable:
    """The tools of a run with MCP servers (a :class:`autonomous._run._tool_table.ToolTable`).

    A server's tool keeps its own name unless a tool of the agent, or of another server, has
    it: then it is ``{server}__{tool}``. Names are made safe for every provider (letters,
    digits, ``_`` and ``-``, at most 64). Whatever name it is offered under, each server tool
    is known to the permission gate by all of them (:func:`known_names`, its ``aliases``): a
    rule written for its own name or for ``{server}__*`` holds when a server is added or
    taken away. ``clock`` and ``time_left`` bound each server's start (see :class:`Link`).
    """

    def __init__(
        self,
        servers: Sequence[MCPServer],
        local: Sequence[Tool],
        log: FilteringBoundLogger,
        *,
        clock: Clock | None = None,
        time_left: Callable[[], float | None] = lambda: None,
    ) -> None:
        self._log = log
        self._local = tuple(local)
        self._links = [Link(server, log, clock=clock, time_left=time_left) for server in servers]
        self._tools = self._local

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[MCPToolTable]:
        """Start every server (one after another) and list their tools; close them at the end.

        The block runs inside the servers' task group; an error raised in it (or by a
        server's start) is raised again outside it, as itself, not in an exception group.

        Raises:
            MCPServerError: a server that could not be started, by name.
        """
        error: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                try:
                    for link in self._links:
                        await link.start(tg)
                        self._log.info("mcp_server_connected", server=link.server.name,
                                       tools=len(link.tools))  # fmt: skip
                    self._rebuild()
                    yield self
                except Exception as exc:
                    error = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            for link in self._links:
                link.close()
        if error is not None:
            raise error

    def tools(self) -> tuple[Tool, ...]:
        """The agent's tools, then each server's, as they are now."""
        return self._tools

    async def refresh(self) -> bool:
        """List again the tools of each server that said they changed; whether any did."""
        for link in self._links:
            if link.stale:
                await link.relist()
        if not any(link.fresh for link in self._links):
            return False
        self._rebuild()
        return True

    def _rebuild(self) -> None:
        local = {tool.name for tool in self._local}
        counts = Counter(_safe(t.name) for link in self._links for t in link.tools)
        tools, seen = list(self._local), set(local)
        for link in self._links:
            link.fresh = False
            for remote in link.tools:
                name = _safe(remote.name)
                if name in local or counts[name] > 1:
                    name = _safe(qualified(link.server.name, remote.name))
                tool = self._tool(link, remote, name) if name not in seen else None
                if tool is not None:
                    tools.append(tool)
                    seen.add(name)
        self._tools = tuple(tools)

    def _tool(self, link: Link, remote: types.Tool, name: str) -> Tool | None:
        """The Tool for ``remote``; None (and a warning) when it cannot be offered."""
        hints = remote.annotations or types.ToolAnnotations()
        read_only = hints.read_only_hint is True
        schema = dict(remote.input_schema)
        schema.setdefault("type", "object")
        text = (remote.description or "").strip()
        text = text or f"{remote.title or remote.name} (MCP server {link.server.name})"
        try:
            return Tool(
                name=name,
                description=text
                or f"{remote.title or remote.name} (MCP server {link.server.name})",
                parameters=schema,
                fn=_caller(link, remote.name),
                aliases=known_names(link.server.name, remote.name),
                read_only=read_only,
                idempotent=hints.idempotent_hint is True,
                # MCP's default: a tool that is not read-only may be destructive.
                destructive=not read_only and hints.destructive_hint is not False,
            )
        except ConfigurationError as exc:
            self._log.warning("mcp_tool_skipped", server=link.server.name, tool=remote.name,
                              error=reason(exc))  # fmt: skip
            return None


def qualified(server: str, remote: str) -> str:
    """The name a clash gives the tool ``remote`` of ``server``, before it is made safe."""
    return f"{server}__{remote}"


def known_names(server: str, remote: str) -> tuple[str, ...]:
    """Every name the tool ``remote`` of ``server`` is known by, whichever it is offered
    under: its own name as the server declares it, the one it is offered under alone, and
    ``{server}__{tool}`` (as declared, and as offered on a clash). Built from the server and
    the tool alone, never from the other tools of the run, so the gate decides a tool alike
    however the table names it."""
    both = qualified(server, remote)
    return tuple(dict.fromkeys((remote, _safe(remote), both, _safe(both))))


def _caller(link: Link, remote: str) -> Callable[..., Awaitable[str]]:
    """The tool function: call ``remote`` on the link's server, its result as text."""

    async def call(**arguments: Any) -> str:
        return result_text(await link.call(remote, arguments))

    return call


def _safe(name: str) -> str:
    """``name`` as a tool name every provider accepts."""
    return _UNSAFE.sub("_", name)[:64] or "tool"

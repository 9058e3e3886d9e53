"""MCP servers as tools: ``Agent(..., mcp_servers=[MCPServer.stdio(...), MCPServer.http(...)])``.

Needs the ``[mcp]`` extra (the official ``mcp`` SDK): ``pip install 'bounded-autonomous[mcp]'``.

A run connects its agent's servers when it starts (a server that cannot start, or does not
answer within its ``connect_timeout`` or what is left of the run's ``max_wallclock``, on the
run's clock, fails the start with :class:`MCPServerError`, by name), lists their tools and
offers them to the model as ordinary tools, under their own names, or ``{server}__{tool}`` when
a name is taken (by a tool of the agent or of another server). Each call goes the way of any
tool call: the permission gate (``readOnlyHint`` makes a tool read-only, which ``Mode.PLAN``
allows; ``destructiveHint`` is shown to a prompter; rules are tried on every name of the tool,
its own, ``{server}__{tool}`` and the one it is offered under, so ``deny=["delete_*"]`` and
``deny=["disk__*"]`` hold whatever a clash renames), the run's ``tool_timeout``, truncation,
progress events, the event log. Only a tool whose annotations say ``idempotentHint`` is run
again on resume after a crash cut its call short. A server that says its tool list changed is
listed again before the next model call; one that went away is started again (once per call); a
call it was running is answered as interrupted, never sent again. Server stderr goes to the
``autonomous.mcp`` logger at debug.

Map:
    _server.py    MCPServer: how to reach one server (stdio command or streamable HTTP URL)
    _transport.py the SDK's transports for it, server stderr to the log, end-of-stream watch
    _link.py      one connected server: its keeper task, calls, reconnecting, list changes
    _content.py   a tool result's content as the text the model reads
    _table.py     MCPToolTable: the run's tools, the agent's and every server's, named apart
"""

from __future__ import annotations

try:
    import mcp as _sdk  # noqa: F401
except ImportError as exc:  # pragma: no cover - the tests run with the extra
    raise ImportError(
        "autonomous.mcp needs the MCP SDK: pip install 'bounded-autonomous[mcp]'"
    ) from exc

from .._errors import MCPServerError
from ._content import MCPToolError
from ._server import MCPServer

__all__ = ["MCPServer", "MCPServerError", "MCPToolError"]

"""A small MCP server for the tests: ``python -m tests.mcp_servers.toolbox [--http PORT]``.

Its tools: ``echo`` (read-only), ``write_note`` (destructive), ``delete_file`` (deletes the
file at a path: a test sees whether it really ran), ``fail`` (an error result),
``block`` (waits until cancelled), ``die`` (the process is killed during the call),
``add_tool`` (adds ``extra`` and says the list changed), ``meta`` (the request's ``_meta``
as JSON) and ``starts`` (how many times this server has started, counted in ``STARTS_FILE``;
with ``START_ONCE`` set it refuses to start a second time).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("toolbox", log_level="WARNING")
_STARTS = os.environ.get("STARTS_FILE", "")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Say the text back."""
    print(f"echo called with {len(text)} characters", file=sys.stderr, flush=True)
    return text


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def write_note(text: str) -> str:
    """Overwrite the note with the text."""
    return f"wrote {len(text)} characters"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_file(path: str) -> str:
    """Delete the file at path."""
    Path(path).unlink()
    return f"deleted {path}"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ToolError("the disk is on fire")


@server.tool()
async def block() -> str:
    """Wait until the call is cancelled."""
    await anyio.sleep_forever()
    return "never"


@server.tool()
def die() -> str:
    """Kill this server during the call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "never"


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Add the tool 'extra' and tell the client the list changed."""

    def extra(x: int) -> int:
        """Double x."""
        return 2 * x

    server.add_tool(extra)
    await ctx.notify_tools_changed()  # 2026 clients listen for it
    try:  # clients of the handshake era get a notification
        await ctx.request_context.session.send_tool_list_changed()
    except Exception as exc:
        print(f"no legacy notification: {exc}", file=sys.stderr, flush=True)
    return "added extra"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def meta(ctx: Context) -> str:
    """The request's _meta, as JSON."""
    return json.dumps(dict(ctx.request_context.meta or {}), default=str)


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def starts() -> str:
    """How many times this server has started."""
    return Path(_STARTS).read_text() if _STARTS else "0"


def _count_start() -> None:
    """Count this start in STARTS_FILE; with START_ONCE set, refuse every start after the
    first (exit 4)."""
    if _STARTS:
        path = Path(_STARTS)
        count = int(path.read_text()) if path.exists() else 0
        if count and os.environ.get("START_ONCE"):
            print("this server starts only once", file=sys.stderr, flush=True)
            sys.exit(4)
        path.write_text(str(count + 1))


if __name__ == "__main__":
    _count_start()
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")

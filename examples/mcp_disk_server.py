"""The disk check of the monitor examples as an MCP server, written with the MCP SDK.

Speaks MCP over stdio (what ``examples/mcp_monitor.py`` starts) or, with ``--http PORT``,
streamable HTTP on 127.0.0.1. ``check_disk`` is annotated read-only and idempotent: a
permission gate in PLAN mode runs it, and a resumed run may call it again.

    python examples/mcp_disk_server.py              # stdio, for an MCP client
    python examples/mcp_disk_server.py --http 8765  # http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

sys.path.insert(0, str(Path(__file__).resolve().parent / "specs"))
from monitor_tools import check_disk as measure  # the spec's own disk check

server = MCPServer("disk", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def check_disk(path: str = "/") -> dict[str, Any]:
    """Return the disk usage of ``path``: total bytes and the percentage used."""
    return measure(path)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")

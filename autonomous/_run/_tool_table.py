"""The run's tool table when tools come from elsewhere too (MCP servers): the protocol the
turn runner reads its tools from, and the one place a run opens it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Protocol

from structlog.typing import FilteringBoundLogger

from scheduler import Clock

from .._tools._tools import Tool

if TYPE_CHECKING:
    from .._agent import Agent


class ToolTable(Protocol):
    """Every tool of a run, the agent's own and those of its MCP servers, which may change
    while the run goes on (a server says its list changed)."""

    def tools(self) -> tuple[Tool, ...]:
        """The tools as they are now: the agent's own first, under their own names."""
        ...

    async def refresh(self) -> bool:
        """Read again what changed since the last look; whether :meth:`tools` changed.

        Called between model calls; never raises (a list that cannot be read stays as it was).
        """
        ...


async def open_tool_table(
    agent: Agent,
    stack: AsyncExitStack,
    log: FilteringBoundLogger,
    *,
    clock: Clock | None = None,
    time_left: Callable[[], float | None] = lambda: None,
) -> ToolTable | None:
    """Connect the agent's MCP servers, owned by ``stack`` (closed when the run ends); None
    for an agent without any. Each server's start is bounded on ``clock`` (the run's) by its
    ``connect_timeout``, or by ``time_left()`` (what the run's wall-clock budget leaves;
    None: no budget) when that is less.

    Raises:
        MCPServerError: a server that cannot be started or does not answer, by name.
    """
    if not agent.mcp_servers:
        return None
    from ..mcp._table import MCPToolTable

    table = MCPToolTable(agent.mcp_servers, agent.tools, log, clock=clock, time_left=time_left)
    return await stack.enter_async_context(table.connected())

"""PermissionRequest and the Prompter protocol: what a prompter is asked, and how."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Protocol

import attrs

from ._caller import Caller
from ._rules import known_names, to_aliases


def _read_only_copy(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(arguments))


@attrs.frozen
class PermissionRequest:
    """One tool call awaiting a yes or no: the tool's name (the one the model called it by),
    its arguments (a read-only shallow copy), who asked (``None`` when unknown), whether the
    tool is read-only, whether it may destroy something (an MCP tool's ``destructiveHint``),
    and the other names it is known by (``aliases``: an MCP tool's own name on its server and
    ``{server}__{tool}``), so that a prompter can show what the tool really is."""

    tool: str
    arguments: Mapping[str, Any] = attrs.field(converter=_read_only_copy)
    caller: Caller | None = None
    read_only: bool = False
    destructive: bool = False
    aliases: tuple[str, ...] = attrs.field(default=(), converter=to_aliases, kw_only=True)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name of the tool: ``tool`` first, then each alias not equal to it."""
        return known_names(self.tool, self.aliases)


class Prompter(Protocol):
    """Asks someone whether a tool call may run: ``True`` allows it, anything else denies it.

    The gate bounds each prompt with its ``prompt_timeout``; a prompter that runs out of time
    or raises counts as a denial. A prompter should let cancellation propagate.
    """

    async def __call__(self, request: PermissionRequest, /) -> bool:
        """Answer ``request``: ``True`` to allow the call."""
        ...

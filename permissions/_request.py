"""PermissionRequest and the Prompter protocol: what a prompter is asked, and how."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Protocol

import attrs

from ._caller import Caller


def _read_only_copy(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(arguments))


@attrs.frozen
class PermissionRequest:
    """One tool call awaiting a yes or no: the tool's name, its arguments (a read-only
    shallow copy), who asked (``None`` when unknown), whether the tool is read-only, and
    whether it may destroy something (an MCP tool's ``destructiveHint``)."""

    tool: str
    arguments: Mapping[str, Any] = attrs.field(converter=_read_only_copy)
    caller: Caller | None = None
    read_only: bool = False
    destructive: bool = False


class Prompter(Protocol):
    """Asks someone whether a tool call may run: ``True`` allows it, anything else denies it.

    The gate bounds each prompt with its ``prompt_timeout``; a prompter that runs out of time
    or raises counts as a denial. A prompter should let cancellation propagate.
    """

    async def __call__(self, request: PermissionRequest, /) -> bool:
        """Answer ``request``: ``True`` to allow the call."""
        ...

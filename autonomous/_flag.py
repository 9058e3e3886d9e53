"""A set-once flag whose waitable event is made only when someone waits (runs are many)."""

from __future__ import annotations

import anyio


class Flag:
    """Like ``anyio.Event`` but costs almost nothing until the first ``wait()``."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        """Set the flag and wake every waiter; idempotent."""
        self._set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        """True once set."""
        return self._set

    async def wait(self) -> None:
        """Return once the flag is set (a checkpoint when it already is)."""
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

"""Test prompters for the permissions tests."""

from __future__ import annotations

import io
import queue
import threading

import anyio

from permissions import PermissionRequest


class RecordingPrompter:
    """Answers every request with a fixed value and remembers the requests."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.requests: list[PermissionRequest] = []

    async def __call__(self, request: PermissionRequest, /) -> bool:
        """Record ``request`` and return the fixed answer."""
        self.requests.append(request)
        return self.answer  # type: ignore[return-value]


class NeverAnswers:
    """Waits on an event that is never set, so only a timeout or cancellation ends it."""

    def __init__(self) -> None:
        self.started = anyio.Event()

    async def __call__(self, request: PermissionRequest, /) -> bool:
        """Wait forever."""
        self.started.set()
        await anyio.Event().wait()
        raise AssertionError("unreachable")


class Raising:
    """Raises the given exception."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def __call__(self, request: PermissionRequest, /) -> bool:
        """Raise."""
        raise self.error


class QueueStream:
    """An input stream whose ``readline`` blocks until the test puts a line."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.reads_started = 0
        self.reads_done = threading.Semaphore(0)

    def readline(self) -> str:
        """Block until a line is put, then return it."""
        self.reads_started += 1
        try:
            return self.lines.get(timeout=30)
        finally:
            self.reads_done.release()


class WatchedOut(io.StringIO):
    """An output stream that sets ``written`` whenever something is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = anyio.Event()

    def write(self, text: str, /) -> int:
        """Write ``text`` and signal it."""
        count = super().write(text)
        self.written.set()
        return count

"""Test prompters for the permissions tests."""

from __future__ import annotations

import io
import queue
import threading

import anyio

from permissions import Decision, Gate, PermissionRequest
from scheduler import FakeClock


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


async def check_timing_out(gate: Gate, clock: FakeClock, tool: str = "t") -> Decision:
    """``gate.check(tool, {})`` on ``clock``, which is advanced past ``gate.prompt_timeout``
    once the prompt waits: a second short of it first, when no answer may have come yet.

    The gate's ``prompt_timeout`` must be over a second.
    """
    result: list[Decision] = []

    async def ask() -> None:
        result.append(await gate.check(tool, {}, clock=clock))

    # A gate that ignored the clock would wait out prompt_timeout in real time instead.
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            clock.advance(gate.prompt_timeout - 1)
            await anyio.wait_all_tasks_blocked()
            assert [] == result, "the prompt ended before its timeout"
            clock.advance(1)
    (decision,) = result
    return decision

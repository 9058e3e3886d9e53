"""What the event loop reported during a test, so the test can fail on it.

Two signals hide defects that tests otherwise pass over: an exception an asyncio loop hands
to its exception handler ("Exception in callback", "Task exception was never retrieved"),
which is only logged; and a coroutine that is never awaited, which is only a warning, and
often only when the garbage collector gets to it. :class:`LoopGuard` catches both, for
loops the anyio pytest plugin runs and for a test's own ``asyncio.run`` alike.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest


class LoopGuard:
    """Records every call of any asyncio loop's exception handler while installed."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Patch ``BaseEventLoop.call_exception_handler`` (every loop's way in) until
        ``monkeypatch`` is undone; the loop's own handling still runs."""
        original = asyncio.BaseEventLoop.call_exception_handler
        reports = self.reports

        def recording(loop: asyncio.BaseEventLoop, context: dict[str, Any]) -> None:
            reports.append(context)
            original(loop, context)

        monkeypatch.setattr(asyncio.BaseEventLoop, "call_exception_handler", recording)

    def messages(self) -> list[str]:
        """What was reported, one line each: the message and the exception, if any."""
        lines = []
        for context in self.reports:
            exc = context.get("exception")
            lines.append(f"{context.get('message', '')} {exc!r}" if exc else context["message"])
        return lines

    def clear(self) -> None:
        """Forget what was reported (a test that triggers a report on purpose)."""
        self.reports.clear()


def unawaited_after_collection() -> list[str]:
    """Collect garbage now and return the "never awaited" warnings that fired.

    Other warnings raised by the collection are issued again, for the test's filters.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    unawaited = []
    for w in caught:
        if issubclass(w.category, RuntimeWarning) and "was never awaited" in str(w.message):
            unawaited.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return unawaited

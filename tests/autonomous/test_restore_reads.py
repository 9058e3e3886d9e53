"""What a resume reads: flat in the session's length, whatever its history options."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import pytest

from autonomous import Agent, StopReason, run_autonomous
from autonomous._durable._restore import restore
from autonomous._state._history import Window
from autonomous.testing import ScriptedModel, reply
from eventlog import Event, EventKind, MemoryEventLog, SessionRef

pytestmark = pytest.mark.anyio


class LookBacks(MemoryEventLog):
    """A memory log that notes which kinds each ``read_last`` looked back for."""

    def __init__(self) -> None:
        super().__init__()
        self.looked_for: list[tuple[EventKind, ...]] = []

    async def read_last(self, key: Any, kinds: Collection[EventKind], n: int) -> list[Event]:
        self.looked_for.append(tuple(kinds))
        return await super().read_last(key, kinds, n)


async def twelve_turns(log: MemoryEventLog) -> SessionRef:
    """A session of twelve turns on ``log`` (one answer each)."""
    ref = SessionRef(log, "app", "user", "long")
    model = ScriptedModel([reply(f"turn {n}") for n in range(12)])
    result = await run_autonomous(
        lambda extra: Agent(model, tools=extra, session=ref), "watch", max_turns=12
    )
    assert result.reason == StopReason.MAX_TURNS_EXCEEDED
    return ref


class TestSummaryLookBack:
    async def test_a_window_without_summaries_never_looks_back_for_one(self) -> None:
        """Looking back for the newest summary scans until it finds one: in a session that
        never had one, that is its whole log. Only a summarising window looks."""
        log = LookBacks()
        ref = await twelve_turns(log)
        log.looked_for.clear()
        restored = await restore(log, ref.key, window=Window(4, 1))
        assert restored.history.first_turn > 1  # the window was cut: a summary could have applied
        assert (EventKind.HISTORY_SUMMARY,) not in log.looked_for

    async def test_a_summarising_window_reads_its_summary(self) -> None:
        log = LookBacks()
        ref = await twelve_turns(log)
        log.looked_for.clear()
        restored = await restore(log, ref.key, window=Window(4, 1, summarised=True))
        assert (EventKind.HISTORY_SUMMARY,) in log.looked_for
        assert restored.history.summary is None  # none was written

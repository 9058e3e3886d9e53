"""How many events a session has: what ``autonomous show --tail`` reports ("12 of 220")."""

from __future__ import annotations

import pytest

from eventlog import (
    Event,
    EventLog,
    MemoryEventLog,
    Note,
    PostgresEventLog,
    SessionKey,
    SqliteEventLog,
)

pytestmark = pytest.mark.anyio

A = SessionKey("app", "u", "a")
B = SessionKey("app", "u", "b")


class TestCount:
    async def test_counts_the_events_of_one_session(self, store: EventLog) -> None:
        """Each session's own events, none of another's; 0 for an unknown session."""
        assert isinstance(store, MemoryEventLog | SqliteEventLog | PostgresEventLog)
        await store.append([Event.create(A, Note(f"a{i}")) for i in range(3)])
        await store.append([Event.create(B, Note("b"))])
        assert (3, 1, 0) == (
            await store.count(A),
            await store.count(B),
            await store.count(SessionKey("app", "u", "none")),
        )

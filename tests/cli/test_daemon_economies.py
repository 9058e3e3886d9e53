"""Specification of the daemon's trips to the store per resume: the final checkpoint of a run
takes the claimed lease with it, so the daemon has none left to release."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from autonomous._control._remote import send_inject
from eventlog import Event, Lease

from .test_daemon_fleet import _async_len_at_least, deferred_fleet, key_of, until

#: The daemons' poll here: an hour (the clock moves only when a test says so).
POLL = 3600


def count_releases(log: Any) -> Counter[str]:
    """Count the log's ``append_and_release`` calls and the ``release_lease`` calls made
    apart from them (the in-memory store's own release inside the first is not one)."""
    counts: Counter[str] = Counter()
    both, release = log.append_and_release, log.release_lease
    inside = [False]

    async def append_and_release(events: Sequence[Event], lease: Lease) -> list[int]:
        counts["append_and_release"] += 1
        inside[0] = True
        try:
            seqs: list[int] = await both(events, lease)
            return seqs
        finally:
            inside[0] = False

    async def release_lease(lease: Lease) -> None:
        if not inside[0]:
            counts["release_lease"] += 1
        await release(lease)

    log.append_and_release = append_and_release
    log.release_lease = release_lease
    return counts


class TestReleaseWithTheLastWrite:
    @pytest.mark.anyio
    async def test_a_run_that_ends_releases_its_claim_with_its_final_checkpoint(
        self, in_process: Path
    ) -> None:
        """Each claimed session's run ends with one append-and-release; the daemon makes
        no release call after it, and no lease is left held."""
        fleet = await deferred_fleet(in_process, ["e1", "e2"])
        counts = count_releases(fleet.log)
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: _async_len_at_least(fleet.turns("e1"), 3))
            await until(lambda: _async_len_at_least(fleet.turns("e2"), 3))
            for sid in ("e1", "e2"):
                await send_inject(fleet.log, key_of(sid), "finish now")
            await until(lambda: len(fleet.events("finished")) == 2)
            tg.cancel_scope.cancel()
        assert {"completed"} == {f["reason"] for f in fleet.events("finished")}
        assert (2, 0) == (counts["append_and_release"], counts["release_lease"])
        assert [None, None] == [s.holder for s in await fleet.log.sessions()]


class TestPausedListing:
    @pytest.mark.anyio
    async def test_the_due_sessions_are_listed_at_most_once_a_poll(self, in_process: Path) -> None:
        """Passes woken by notifications between polls (the clock standing) list the due
        sessions for paused ones once; the next poll lists them again."""
        fleet = await deferred_fleet(in_process, ["p1", "p2"], watched=True, poll=POLL)
        listed: list[object] = []
        due = fleet.log.due_sessions

        async def counted(now: object) -> Any:
            listed.append(now)
            return await due(now)

        fleet.log.due_sessions = counted
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: _async_len_at_least(fleet.turns("p1"), 3))
            await until(lambda: _async_len_at_least(fleet.turns("p2"), 3))
            await send_inject(fleet.log, key_of("p1"), "finish now")
            await until(lambda: len(fleet.events("finished")) == 1)
            assert 1 == len(listed)
            fleet.clock.advance(POLL)
            await until(lambda: len(listed) == 2)
            await send_inject(fleet.log, key_of("p2"), "finish now")
            await until(lambda: len(fleet.events("finished")) == 2)
            tg.cancel_scope.cancel()
        assert 2 == len(listed)

"""EventLog.prune: finished sessions lose their old events and keep their final checkpoint."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from eventlog import (
    AssistantMessage,
    Checkpoint,
    Control,
    Event,
    EventLog,
    InboxQueued,
    Lease,
    LeaseHolder,
    Note,
    PrunedSession,
    PruneResult,
    SessionKey,
    SessionLocked,
    SqliteEventLog,
    UserMessage,
)
from tests.eventlog.conftest import FakeClock
from tests.eventlog.test_eventlog_sqlite import wal_commits

pytestmark = pytest.mark.anyio

DONE = SessionKey("app", "ops", "done")
OTHER = SessionKey("app", "ops", "other")


def history(key: SessionKey, at: datetime, *, turns: int = 2, **checkpoint: Any) -> list[Event]:
    """``turns`` turns of messages and checkpoints at ``at``; the last checkpoint gets
    ``checkpoint``'s fields (a stop reason, stopped)."""
    events: list[Event] = []
    for turn in range(1, turns + 1):
        last = checkpoint if turn == turns else {}
        events += [
            Event.create(key, UserMessage(f"prompt {turn}", turn), at=at),
            Event.create(key, AssistantMessage(f"answer {turn}", turn), at=at),
            Event.create(key, Checkpoint(turn, 10 * turn, 5, 0.5 * turn, "go on", **last), at=at),
        ]
    return events


def old(clock: FakeClock) -> datetime:
    """A time forty days before the clock's now."""
    return clock.now - timedelta(days=40)


def cut(clock: FakeClock) -> datetime:
    """The cut-off the tests prune at: thirty days before the clock's now."""
    return clock.now - timedelta(days=30)


class TestPruneFinished:
    """A session that finished before the cut-off keeps only its final checkpoint."""

    async def test_keeps_only_the_final_checkpoint(self, store: EventLog, clock) -> None:
        """All the events of a completed old session go but its final checkpoint."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        final = await store.latest_checkpoint(DONE)

        result = await store.prune(cut(clock))

        assert [final] == await store.read(DONE)
        assert final == await store.latest_checkpoint(DONE)
        assert (1, 5) == (result.sessions, result.events)
        assert (PrunedSession(DONE, 5, "completed", old(clock)),) == result.pruned

    async def test_keeps_the_notes(self, store: EventLog, clock) -> None:
        """A session's notes (what started it: the CLI's spec note) stay with its checkpoint."""
        note = Event.create(DONE, Note("agent spec", {"spec": "a.toml"}), at=old(clock))
        await store.append([note, *history(DONE, old(clock), stop_reason="completed")])

        result = await store.prune(cut(clock))

        kinds = [str(event.kind) for event in await store.read(DONE)]
        assert (5, ["note", "checkpoint"]) == (result.events, kinds)

    async def test_summary_survives(self, store: EventLog, clock) -> None:
        """sessions() lists a pruned session as before: turns, cost, stop reason, time."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        before = await store.sessions()

        await store.prune(cut(clock))

        assert before == await store.sessions()

    @pytest.mark.parametrize(
        "fields",
        [
            {"stop_reason": "completed"},
            {"stop_reason": "max_turns_exceeded"},
            {"stop_reason": "max_cost_exceeded"},
            {"stop_reason": "retry_policy_aborted"},
            {"stop_reason": "aborted"},
            {"stop_reason": "context_cancelled", "stopped": True},
            {"stop_reason": "deferred", "stopped": True},  # stopped during a sleep
        ],
    )
    async def test_finished_stop_reasons(self, store: EventLog, clock, fields: Any) -> None:
        """Completed, out of budget, aborted and stopped on purpose are all finished."""
        await store.append(history(DONE, old(clock), **fields))

        result = await store.prune(cut(clock))

        assert [DONE] == [pruned.key for pruned in result.pruned]

    @pytest.mark.parametrize(
        "fields",
        [
            {},  # still running, or crashed: interrupted
            {"stop_reason": "deferred", "next_wake_at": datetime(2000, 1, 1)},
            {"stop_reason": "context_cancelled"},  # its caller cancelled it: interrupted
            {"stop_reason": "lease_lost"},
        ],
    )
    async def test_unfinished_sessions_are_kept(self, store: EventLog, clock, fields: Any) -> None:
        """Deferred (due or not), running, interrupted and cancelled sessions keep everything."""
        await store.append(history(DONE, old(clock), **fields))
        events = await store.read(DONE)

        result = await store.prune(cut(clock))

        assert (0, 0) == (result.sessions, result.events)
        assert events == await store.read(DONE)

    async def test_a_stop_request_to_a_sleeping_session_finishes_it(
        self, store: EventLog, clock
    ) -> None:
        """A deferred session stopped while it slept (no run wrote a checkpoint since) is
        stopped for good: prune takes it."""
        await store.append(
            [
                *history(DONE, old(clock), stop_reason="deferred"),
                Event.create(DONE, Control("stop"), at=old(clock)),
            ]
        )
        result = await store.prune(cut(clock))
        assert [DONE] == [pruned.key for pruned in result.pruned]

    async def test_sessions_newer_than_the_cut_off_are_kept(self, store: EventLog, clock) -> None:
        """A session that finished after the cut-off keeps all its events."""
        await store.append(history(DONE, clock.now - timedelta(days=2), stop_reason="completed"))

        result = await store.prune(cut(clock))

        assert 0 == result.sessions
        assert 6 == len(await store.read(DONE))

    async def test_a_recent_event_after_the_end_keeps_the_session(
        self, store: EventLog, clock
    ) -> None:
        """A session written to after the cut-off (an inject after it completed) is kept."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        await store.append([Event.create(DONE, InboxQueued("late", "m1"), at=clock.now)])

        result = await store.prune(cut(clock))

        assert 0 == result.sessions
        assert 7 == len(await store.read(DONE))

    async def test_other_sessions_are_untouched(self, store: EventLog, clock) -> None:
        """Pruning one session leaves every event of the others where it was."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        await store.append(history(OTHER, old(clock), stop_reason="deferred"))
        others = await store.read(OTHER)

        await store.prune(cut(clock))

        assert others == await store.read(OTHER)

    async def test_pruning_again_removes_nothing(self, store: EventLog, clock) -> None:
        """A session already pruned is not reported again."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        await store.prune(cut(clock))

        again = await store.prune(cut(clock))

        assert PruneResult(before=cut(clock)) == again

    async def test_seqs_keep_growing(self, store: EventLog, clock) -> None:
        """An append after a prune gets a seq larger than every seq handed out before it,
        even when the newest event of the log was one of the pruned session's."""
        seqs = await store.append(history(DONE, old(clock), stop_reason="completed"))
        seqs += await store.append([Event.create(DONE, InboxQueued("late", "m1"), at=old(clock))])
        await store.prune(cut(clock))

        (seq,) = await store.append([Event.create(OTHER, UserMessage("new", 1))])

        assert seq > max(seqs)

    async def test_leaves_the_lease_free(self, store: EventLog, clock) -> None:
        """Prune holds the session while it deletes and lets it go after."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        await store.prune(cut(clock))

        held = [s.holder for s in await store.sessions()]
        lease = await store.acquire_lease(DONE, LeaseHolder("elsewhere", 4242, "next"), ttl=30)

        assert ([None], DONE) == (held, lease.key)


class TestPruneSafety:
    """Prune never touches a session some live process holds, and a dry run touches nothing."""

    async def test_held_session_is_left_alone(self, store: EventLog, clock) -> None:
        """A finished session whose lease a live process holds keeps everything."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        await store.acquire_lease(DONE, LeaseHolder("elsewhere", 4242, "run"), ttl=30)
        events = await store.read(DONE)

        result = await store.prune(cut(clock))

        assert ((), (DONE,)) == (result.pruned, result.held)
        assert events == await store.read(DONE)

    async def test_held_session_is_still_held(self, store: EventLog, clock) -> None:
        """Prune does not take or drop another holder's lease."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        await store.acquire_lease(DONE, LeaseHolder("elsewhere", 4242, "run"), ttl=30)

        await store.prune(cut(clock))

        with pytest.raises(SessionLocked):
            await store.acquire_lease(DONE, LeaseHolder("elsewhere", 4242, "other"), ttl=30)

    async def test_expired_lease_does_not_protect(self, store: EventLog, clock) -> None:
        """A lease that ran out holds nothing: its session is pruned."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        await store.acquire_lease(DONE, LeaseHolder("elsewhere", 4242, "run"), ttl=30)
        clock.advance(31)

        result = await store.prune(cut(clock))

        assert [DONE] == [pruned.key for pruned in result.pruned]

    async def test_dry_run_removes_nothing(self, store: EventLog, clock) -> None:
        """A dry run reports what would go and leaves every event in place."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        events = await store.read(DONE)

        result = await store.prune(cut(clock), dry_run=True)

        assert (True, 1, 5) == (result.dry_run, result.sessions, result.events)
        assert events == await store.read(DONE)

    async def test_dry_run_reports_what_a_prune_removes(self, store: EventLog, clock) -> None:
        """The dry run's list is the list the prune then removes."""
        await store.append(history(DONE, old(clock), stop_reason="completed"))
        await store.append(history(OTHER, old(clock), turns=3, stop_reason="aborted"))

        dry = await store.prune(cut(clock), dry_run=True)
        real = await store.prune(cut(clock))

        assert dry.pruned == real.pruned
        assert {DONE, OTHER} == {pruned.key for pruned in real.pruned}


class TestSqlitePrune:
    """SqliteEventLog's prune: short transactions, and a file that reopens as it was left."""

    async def test_deletes_in_short_transactions(self, db_path: Path, clock) -> None:
        """Eight events in batches of three: three delete commits, between the lease's two."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            await log.append(history(DONE, old(clock), turns=3, stop_reason="completed"))
            before = wal_commits(db_path)

            result = await log.prune(cut(clock), batch=3)

            assert (8, 1 + 3 + 1) == (result.events, wal_commits(db_path) - before)

    async def test_keeps_the_newest_row_of_the_log(self, db_path: Path, clock) -> None:
        """The log's newest event stays even when its session is pruned: its seq is not
        handed out again."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            await log.append(history(DONE, old(clock), stop_reason="completed"))
            late = Event.create(DONE, InboxQueued("late", "m1"), at=old(clock))
            (late_seq,) = await log.append([late])

            result = await log.prune(cut(clock))

            kinds = [str(event.kind) for event in await log.read(DONE)]
            assert (5, ["checkpoint", "inbox_queued"]) == (result.events, kinds)
            assert late_seq == (await log.read(DONE))[-1].seq

    async def test_reopened_file_lists_the_pruned_session(self, db_path: Path, clock) -> None:
        """After a prune, another log on the file lists the session with its summary."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            await log.append(history(DONE, old(clock), stop_reason="completed"))
            await log.append(history(OTHER, clock.now, stop_reason="deferred"))
            listed = await log.sessions()
            await log.prune(cut(clock))
        async with SqliteEventLog(db_path, clock=clock) as log:
            assert listed == await log.sessions()

    async def test_session_taken_after_the_look_is_held(
        self, db_path: Path, clock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A run that takes the session between the prune's look and its lease wins: the
        session is reported held and keeps its events."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            await log.append(history(DONE, old(clock), stop_reason="completed"))
            taken = LeaseHolder("elsewhere", 4242, "run")
            acquire = log.acquire_lease

            async def run_first(key: SessionKey, asker: LeaseHolder, ttl: float) -> Lease:
                await acquire(key, taken, ttl=30)  # the run, just before the prune's lease
                return await acquire(key, asker, ttl)

            monkeypatch.setattr(log, "acquire_lease", run_first)
            result = await log.prune(cut(clock))

            assert ((), (DONE,), 6) == (result.pruned, result.held, len(await log.read(DONE)))

    async def test_batch_must_be_positive(self, db_path: Path, clock) -> None:
        """A batch of no events is refused."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            with pytest.raises(ValueError, match="batch"):
                await log.prune(cut(clock), batch=0)

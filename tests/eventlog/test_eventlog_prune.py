"""EventLog.prune: finished sessions lose their old events and keep their final checkpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
    PostgresEventLog,
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
LATER = SessionKey("app", "ops", "later")


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


def started(key: SessionKey, at: datetime) -> list[Event]:
    """A session that never wrote a checkpoint: its spec note, an inject sent before any run,
    and the first turn of a run that died before its first checkpoint, all at ``at``."""
    return [
        Event.create(key, Note("agent spec", {"spec": "a.toml"}), at=at),
        Event.create(key, InboxQueued("m1", "hello"), at=at),
        Event.create(key, UserMessage("prompt 1", 1), at=at),
        Event.create(key, AssistantMessage("answer 1", 1), at=at),
    ]


def recent(key: SessionKey, clock: FakeClock) -> Event:
    """An event of ``key`` at the clock's now: the log's newest, so that SQLite, which keeps the
    log's newest row, deletes as the other stores do."""
    return Event.create(key, UserMessage("later", 1), at=clock.now)


class TestPruneInterrupted:
    """prune(interrupted=True) also takes the sessions whose run was cut off, and those that
    never wrote a checkpoint, once quiet since the cut-off and held by no live process."""

    @pytest.mark.parametrize(
        "fields",
        [
            {},  # crashed (or a run still going that nobody holds)
            {"stop_reason": "context_cancelled"},  # its caller cancelled it
            {"stop_reason": "lease_lost"},  # failed: another process took it over
        ],
        ids=["no-stop-reason", "context_cancelled", "lease_lost"],
    )
    async def test_cut_off_sessions_on_request(self, store: EventLog, clock, fields: Any) -> None:
        """Kept by a plain prune; with ``interrupted``, all their events go but the latest
        checkpoint and the notes."""
        note = Event.create(DONE, Note("agent spec", {"spec": "a.toml"}), at=old(clock))
        await store.append([note, *history(DONE, old(clock), **fields)])
        final = await store.latest_checkpoint(DONE)

        plain = await store.prune(cut(clock))
        result = await store.prune(cut(clock), interrupted=True)

        assert ((), (DONE,)) == (plain.pruned, tuple(p.key for p in result.pruned))
        assert final is not None
        assert [note.id, final.id] == [event.id for event in await store.read(DONE)]
        assert final == await store.latest_checkpoint(DONE)
        assert (fields.get("stop_reason"), old(clock), 5) == (
            result.pruned[0].stop_reason,
            result.pruned[0].updated_at,
            result.pruned[0].events,
        )

    @pytest.mark.parametrize(
        "fields",
        [
            {"stop_reason": "deferred", "next_wake_at": datetime(2000, 1, 1)},  # due
            {"stop_reason": "deferred", "next_wake_at": datetime(2100, 1, 1)},
            {"paused": True},  # an operator's hold: it waits for an unpause
        ],
        ids=["due", "deferred", "paused"],
    )
    async def test_waiting_sessions_are_kept_even_so(
        self, store: EventLog, clock, fields: Any
    ) -> None:
        """A session that waits for its wake time or for an unpause is never pruned."""
        await store.append(history(DONE, old(clock), **fields))
        events = await store.read(DONE)

        result = await store.prune(cut(clock), interrupted=True)

        assert ((), events) == (result.pruned, await store.read(DONE))

    async def test_failed_sessions_are_prunable(self, store: EventLog, clock) -> None:
        """What ls calls failed: retry_policy_aborted is finished (a plain prune takes it),
        lease_lost was cut off (taken on request)."""
        await store.append(history(DONE, old(clock), stop_reason="retry_policy_aborted"))
        await store.append(history(OTHER, old(clock), stop_reason="lease_lost"))

        plain = await store.prune(cut(clock))
        asked = await store.prune(cut(clock), interrupted=True)

        assert ([DONE], [OTHER]) == ([p.key for p in plain.pruned], [p.key for p in asked.pruned])

    async def test_a_session_without_a_checkpoint_keeps_only_its_notes(
        self, store: EventLog, clock
    ) -> None:
        """A session that never wrote a checkpoint loses every event but its notes, and is
        still listed, at the time of its newest event left."""
        day_before = old(clock) - timedelta(days=1)
        await store.append(started(DONE, day_before))
        await store.append([recent(OTHER, clock)])

        plain = await store.prune(cut(clock))
        result = await store.prune(cut(clock), interrupted=True)

        assert () == plain.pruned
        assert (PrunedSession(DONE, 3, None, day_before),) == result.pruned
        assert ["note"] == [str(event.kind) for event in await store.read(DONE)]
        (listed,) = [s for s in await store.sessions() if s.key == DONE]
        assert (0, None, day_before) == (
            listed.checkpoint_seq,
            listed.checkpoint,
            listed.updated_at,
        )

    async def test_a_session_without_a_checkpoint_or_notes_goes(
        self, store: EventLog, clock
    ) -> None:
        """A session with no checkpoint and no note loses every event: it is listed no more."""
        await store.append(started(DONE, old(clock))[1:])
        await store.append([recent(OTHER, clock)])

        result = await store.prune(cut(clock), interrupted=True)

        assert (3, []) == (result.events, await store.read(DONE))
        assert [OTHER] == [s.key for s in await store.sessions()]

    async def test_a_stop_before_any_checkpoint_finishes_the_session(
        self, store: EventLog, clock
    ) -> None:
        """A session stopped on purpose before it ever checkpointed is finished: a plain prune
        takes it, keeping its notes."""
        stop = Event.create(DONE, Control("stop"), at=old(clock))
        await store.append([*started(DONE, old(clock)), stop])
        await store.append([recent(OTHER, clock)])

        result = await store.prune(cut(clock))

        assert [(DONE, 4)] == [(p.key, p.events) for p in result.pruned]
        assert ["note"] == [str(event.kind) for event in await store.read(DONE)]

    async def test_recent_events_keep_an_interrupted_session(self, store: EventLog, clock) -> None:
        """A session written to after the cut-off is kept, with or without a checkpoint."""
        await store.append(history(DONE, old(clock)))
        await store.append(started(OTHER, old(clock)))
        late = clock.now - timedelta(days=1)
        await store.append(
            [Event.create(k, InboxQueued("m2", "late"), at=late) for k in (DONE, OTHER)]
        )

        result = await store.prune(cut(clock), interrupted=True)

        assert (0, 7, 5) == (
            result.sessions,
            len(await store.read(DONE)),
            len(await store.read(OTHER)),
        )

    async def test_a_held_session_is_left_alone(self, store: EventLog, clock) -> None:
        """An interrupted session or one without a checkpoint that a live process holds (a
        run that is starting) is left alone, in ``held``."""
        await store.append(history(DONE, old(clock)))
        await store.append(started(OTHER, old(clock)))
        for key in (DONE, OTHER):
            await store.acquire_lease(key, LeaseHolder("elsewhere", 4242, f"run-{key}"), ttl=30)

        result = await store.prune(cut(clock), interrupted=True)

        assert ((), {DONE, OTHER}) == (result.pruned, set(result.held))
        assert (6, 4) == (len(await store.read(DONE)), len(await store.read(OTHER)))

    async def test_dry_run_reports_what_a_prune_removes(self, store: EventLog, clock) -> None:
        """A dry run with ``interrupted`` lists what the prune then removes, and removes
        nothing itself."""
        await store.append(history(DONE, old(clock)))
        await store.append(started(OTHER, old(clock)))
        await store.append([recent(LATER, clock)])
        before = [await store.read(DONE), await store.read(OTHER)]

        dry = await store.prune(cut(clock), dry_run=True, interrupted=True)
        after_dry = [await store.read(DONE), await store.read(OTHER)]
        real = await store.prune(cut(clock), interrupted=True)

        assert (before, dry.pruned) == (after_dry, real.pruned)
        assert ({DONE, OTHER}, True) == ({p.key for p in real.pruned}, dry.dry_run)


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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def durable(
    request: pytest.FixtureRequest, db_path: Path, clock: FakeClock
) -> AsyncIterator[SqliteEventLog | PostgresEventLog]:
    """Each durable store in turn (their prune looks first, then takes each session's lease)."""
    log: SqliteEventLog | PostgresEventLog
    if request.param == "sqlite":
        log = SqliteEventLog(db_path, clock=clock)
    else:
        log = PostgresEventLog(request.getfixturevalue("pg_dsn"), clock=clock, max_size=4)
    async with log:
        yield log


class TestPruneRaces:
    """What a durable log's prune does when a session changes between its look and its lease."""

    async def test_a_first_checkpoint_after_the_look_keeps_the_session(
        self, durable: SqliteEventLog | PostgresEventLog, clock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A session without a checkpoint that a run starts on (and checkpoints) after the
        prune looked keeps every event: the prune finds a checkpoint it did not plan for."""
        await durable.append(started(DONE, old(clock)))
        await durable.append([recent(OTHER, clock)])
        acquire = durable.acquire_lease

        async def run_first(key: SessionKey, asker: LeaseHolder, ttl: float) -> Lease:
            first = Event.create(key, Checkpoint(0, 0, 0, 0.0, "go", goal="watch"))
            await durable.append([first])  # the run's first checkpoint, its lease let go
            return await acquire(key, asker, ttl)

        monkeypatch.setattr(durable, "acquire_lease", run_first)
        result = await durable.prune(cut(clock), interrupted=True)

        assert ((), (), 5) == (result.pruned, result.held, len(await durable.read(DONE)))


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

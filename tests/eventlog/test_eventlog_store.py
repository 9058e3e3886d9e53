"""The EventLog protocol, as both stores (memory and SQLite) must honour it."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import (
    AssistantMessage,
    Budgets,
    Checkpoint,
    Control,
    Event,
    EventKind,
    EventLog,
    InboxQueued,
    Lease,
    LeaseHolder,
    LeaseLost,
    MemoryEventLog,
    Note,
    SessionKey,
    SessionLocked,
    SessionSummary,
    SqliteEventLog,
    StoreUnavailable,
    ToolResult,
    UserMessage,
    new_event_id,
)
from eventlog._rules import (
    NO_MARKS,
    checkpoint_of,
    control_marks,
    is_due,
    summary_before_checkpoint,
    summary_of,
    with_marks,
)
from tests.eventlog.conftest import FakeClock
from tests.eventlog.helpers import add, add_fenced
from tests.strategies import events, summary_events

pytestmark = pytest.mark.anyio

A = SessionKey("app", "ops", "a")
B = SessionKey("app", "ops", "b")
C = SessionKey("app", "ops", "c")
D = SessionKey("app", "ops", "d")

#: The fake clock's time, for strategies drawn before a test has its clock.
START = FakeClock().now


def user(key: SessionKey, text: str = "hello", turn: int = 1) -> Event:
    return Event.create(key, UserMessage(text, turn))


def answer(key: SessionKey, text: str = "hi", turn: int = 1) -> Event:
    return Event.create(key, AssistantMessage(text, turn))


def tool(key: SessionKey, content: str = "ok", turn: int = 1) -> Event:
    return Event.create(key, ToolResult("call-1", "check", content, turn))


def checkpoint(key: SessionKey, turns: int = 1, **fields: Any) -> Event:
    return Event.create(key, Checkpoint(turns, 10, 5, 0.25, "continue", **fields))


def control(key: SessionKey, action: str) -> Event:
    return Event.create(key, Control(action))


def deferred(key: SessionKey, wake_at: datetime | None, turns: int = 1, **fields: Any) -> Event:
    """A checkpoint of a session that deferred itself until ``wake_at``."""
    return checkpoint(key, turns, stop_reason="deferred", next_wake_at=wake_at, **fields)


def wake(key: SessionKey, at: datetime) -> Event:
    """A wake request made at ``at``."""
    return Event.create(key, Control("wake"), at=at)


def holder(name: str, host: str = "elsewhere", pid: int = 4242) -> LeaseHolder:
    return LeaseHolder(host=host, pid=pid, token=name)


def folded(key: SessionKey, appended: list[Event]) -> SessionSummary:
    """The summary of ``key`` as the pure rules fold it from its events (with their seqs):
    the latest checkpoint's, marked by the control requests after it."""
    latest: Event | None = None
    marks = NO_MARKS
    for event in appended:
        if event.kind is EventKind.CHECKPOINT:
            latest, marks = event, NO_MARKS
        else:
            marks = control_marks(event, marks)
    if latest is None:
        return with_marks(summary_before_checkpoint(key, appended[-1].at), marks)
    summary = attrs.evolve(summary_of(latest), checkpoint=checkpoint_of(latest))
    return with_marks(summary, marks)


class TestAppend:
    """append: sequence numbers and atomic batches."""

    async def test_assigns_increasing_seq(self, store: EventLog) -> None:
        """Each appended event gets the next seq, across batches and sessions."""
        first = await store.append([user(A), answer(A)])
        second = await store.append([user(B), tool(A)])
        seqs = first + second
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 4
        assert 0 < seqs[0]

    async def test_returns_the_seqs_the_events_read_back_with(self, store: EventLog) -> None:
        """append returns each event's seq; the events read back are the given ones with it."""
        given_events = [user(A), checkpoint(A)]
        seqs = await store.append(given_events)
        expected = [attrs.evolve(e, seq=s) for e, s in zip(given_events, seqs, strict=True)]
        assert expected == await store.read(A)

    async def test_leaves_the_given_events_alone(self, store: EventLog) -> None:
        """The events given to append keep ``seq == 0``: append changes nothing it was given."""
        given_events = [user(A), answer(A)]
        await store.append(given_events)
        assert [0, 0] == [event.seq for event in given_events]

    async def test_concurrent_appends_interleave_whole(self, store: EventLog) -> None:
        """Batches appended by many tasks at once each land whole and in order, each with seqs
        of its own. (Contiguous within a batch only on a store with one writer: on PostgreSQL
        concurrent batches of other sessions take seqs from the same sequence meanwhile.)"""
        results: list[tuple[SessionKey, list[int]]] = []

        async def run(n: int) -> None:
            key = SessionKey("app", "ops", f"s{n}")
            seqs = await store.append([user(key, str(n)), answer(key), checkpoint(key)])
            results.append((key, seqs))

        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(run, n)
        for key, seqs in results:
            assert seqs == [event.seq for event in await store.read(key)]
            assert seqs == sorted(seqs)
        assert 60 == len({seq for _, seqs in results for seq in seqs})

    async def test_empty_batch_appends_nothing(self, store: EventLog) -> None:
        """Appending no events returns no seqs."""
        assert [] == await store.append([])
        assert [] == await store.read(A)

    async def test_failing_batch_writes_nothing(self, store: EventLog) -> None:
        """A batch that cannot be stored leaves the log as it was, and the log goes on."""
        kept = await add(store, [user(A)])
        broken = Event(key=A, kind=EventKind.CHECKPOINT, payload=Note("not a checkpoint"))
        with pytest.raises(TypeError):
            await store.append([answer(A), broken])
        later = await add(store, [tool(A)])
        assert kept + later == await store.read(A)
        assert None is await store.latest_checkpoint(A)


class TestRead:
    """read: one session's events, oldest first, filtered."""

    async def test_reads_one_session_oldest_first(self, store: EventLog) -> None:
        """Only the asked session's events come back, in append order."""
        a1, _, a2 = await add(store, [user(A), user(B), answer(A)])
        assert [a1, a2] == await store.read(A)

    async def test_unknown_session_is_empty(self, store: EventLog) -> None:
        """A session with no events reads as an empty list."""
        assert [] == await store.read(SessionKey("x", "y", "z"))

    async def test_after_seq(self, store: EventLog) -> None:
        """Only events with a seq greater than ``after_seq`` are read."""
        e1, e2, e3 = await add(store, [user(A), answer(A), tool(A)])
        assert [e2, e3] == await store.read(A, after_seq=e1.seq)
        assert [] == await store.read(A, after_seq=e3.seq)

    async def test_kinds(self, store: EventLog) -> None:
        """Only events of the given kinds are read; no kinds reads nothing."""
        e1, _, e3 = await add(store, [user(A), answer(A), user(A, "again", 2)])
        assert [e1, e3] == await store.read(A, kinds=[EventKind.USER_MESSAGE])
        assert [] == await store.read(A, kinds=[])

    async def test_limit(self, store: EventLog) -> None:
        """At most ``limit`` events are read, the oldest ones."""
        e1, e2, _ = await add(store, [user(A), answer(A), tool(A)])
        assert [e1, e2] == await store.read(A, limit=2)
        assert [] == await store.read(A, limit=0)

    async def test_filters_combine(self, store: EventLog) -> None:
        """after_seq, kinds and limit apply together."""
        stored = await add(store, [user(A, str(n), n) for n in range(6)])
        found = await store.read(
            A, after_seq=stored[1].seq, kinds={EventKind.USER_MESSAGE}, limit=3
        )
        assert stored[2:5] == found

    async def test_negative_limit_is_refused(self, store: EventLog) -> None:
        """A negative limit is a misuse."""
        with pytest.raises(ValueError, match="limit"):
            await store.read(A, limit=-1)


class TestReadLast:
    """read_last: the newest events of some kinds."""

    async def test_newest_of_kinds_oldest_first(self, store: EventLog) -> None:
        """The newest ``limit`` events of the kinds come back in append order."""
        stored = await add(
            store, [user(A, "1"), answer(A), user(A, "2"), tool(A), user(A, "3"), user(B)]
        )
        assert [stored[2], stored[4]] == await store.read_last(A, [EventKind.USER_MESSAGE], 2)

    async def test_fewer_than_limit(self, store: EventLog) -> None:
        """When fewer events match, all of them come back."""
        stored = await add(store, [user(A), answer(A)])
        kinds = [EventKind.USER_MESSAGE, EventKind.ASSISTANT_MESSAGE]
        assert stored == await store.read_last(A, kinds, 10)


class TestLatestCheckpoint:
    """latest_checkpoint: the newest checkpoint of a session."""

    async def test_none_without_checkpoint(self, store: EventLog) -> None:
        """A session that never checkpointed has no latest checkpoint."""
        await store.append([user(A)])
        assert None is await store.latest_checkpoint(A)

    async def test_newest_wins(self, store: EventLog) -> None:
        """The checkpoint appended last is returned, whatever came after it."""
        await store.append([checkpoint(A, 1), checkpoint(B, 7)])
        _, newest_a, _ = await add(store, [checkpoint(A, 2), checkpoint(A, 3), user(A)])
        (newest_b,) = await add(store, [checkpoint(B, 8)])
        assert newest_a == await store.latest_checkpoint(A)
        assert newest_b == await store.latest_checkpoint(B)


class TestSessions:
    """sessions: one summary per session that has an event, newest first."""

    async def test_summaries_newest_first(self, store: EventLog, clock) -> None:
        """Each session is summarised by its latest checkpoint; one without a checkpoint by
        its newest event."""
        wake = clock.now + timedelta(hours=1)
        (first,) = await add(store, [checkpoint(A, 1)])
        (prompt,) = await add(store, [user(C)])
        (second,) = await add(store, [checkpoint(B, 4, stop_reason="deferred", next_wake_at=wake)])
        assert [
            SessionSummary(
                B, 4, 0.25, "deferred", wake, second.at, second.seq, input_tokens=10,
                checkpoint=checkpoint_of(second),
            ),
            SessionSummary(C, 0, 0.0, None, None, prompt.at, 0),
            SessionSummary(
                A, 1, 0.25, None, None, first.at, first.seq, input_tokens=10,
                checkpoint=checkpoint_of(first),
            ),
        ] == await store.sessions()  # fmt: skip

    async def test_a_summary_carries_its_latest_checkpoint(self, store: EventLog, clock) -> None:
        """sessions() gives each session's latest checkpoint (output tokens, outcome, done
        detail, error, budgets: what ls shows), None for one without; due_sessions and claims
        leave it None."""
        budgets = Budgets(max_turns=5, max_cost_usd=1.5)
        done = Checkpoint(
            2, 40, 17, 0.5, "", stop_reason="completed", done_detail="all good",
            outcome="resolved", result={"n": [1, "x"]}, budgets=budgets,
        )  # fmt: skip
        failed = Checkpoint(
            1, 10, 3, 0.1, "go", stop_reason="retry_policy_aborted", error="RuntimeError: boom"
        )
        await store.append([checkpoint(A), Event.create(A, done), Event.create(B, failed)])
        await store.append([user(C), user(A)])
        listed = {s.key: s.checkpoint for s in await store.sessions()}
        assert {A: done, B: failed, C: None} == listed
        wake = checkpoint(D, stop_reason="deferred", next_wake_at=clock.now)
        await store.append([wake])
        assert [None] == [s.checkpoint for s in await store.due_sessions(clock.now)]
        claims = await store.claim_due(clock.now, holder("me"), 30, limit=5)
        assert [None] == [claim.summary.checkpoint for claim in claims]

    async def test_a_session_exists_from_its_first_event(self, store: EventLog, clock) -> None:
        """An inject sent before any run, a spec note, a run that died before its first
        checkpoint: each session is listed, with no turns, no stop reason, and the time of its
        newest event (in UTC, whatever the event's zone)."""
        east = timezone(timedelta(hours=5, minutes=30))
        early = (clock.now - timedelta(hours=2)).astimezone(east)
        late = clock.now - timedelta(minutes=1)
        await store.append(
            [
                Event.create(A, InboxQueued("m1", "hello"), at=early),
                Event.create(B, Note("agent spec", {"spec": "a.toml"}), at=early),
                user(C),
                answer(C),
            ]
        )
        await store.append([Event.create(A, InboxQueued("m2", "again"), at=late)])
        listed = {s.key: s for s in await store.sessions()}
        assert {A, B, C} == set(listed)
        assert (0, 0, 0.0, None, None, late, (False, False), None) == (
            listed[A].checkpoint_seq,
            listed[A].turns,
            listed[A].cost_usd,
            listed[A].stop_reason,
            listed[A].next_wake_at,
            listed[A].updated_at,
            (listed[A].paused, listed[A].stopped),
            listed[A].holder,
        )
        assert (early, UTC) == (listed[B].updated_at, listed[B].updated_at.tzinfo)

    async def test_newest_first_by_checkpoint_else_newest_event(self, store: EventLog) -> None:
        """A session's place is its latest checkpoint's seq, or without one its newest
        event's; later events after a checkpoint do not move it."""
        await store.append([checkpoint(A)])
        await store.append([user(B)])
        await store.append([checkpoint(C)])
        await store.append([user(A), user(D)])
        assert [D, C, B, A] == [s.key for s in await store.sessions()]
        await store.append([user(B)])
        assert [B, D, C, A] == [s.key for s in await store.sessions()]
        await store.append([checkpoint(D)])
        assert [D, B, C, A] == [s.key for s in await store.sessions()]

    async def test_a_session_without_a_checkpoint_shows_its_holder(
        self, store: EventLog, clock
    ) -> None:
        """A live lease on a session without a checkpoint shows as its holder."""
        owner = holder("owner")
        lease = await store.acquire_lease(A, owner, ttl=30)
        await store.append([user(A)], lease=lease)
        assert [str(owner)] == [s.holder for s in await store.sessions()]
        clock.advance(31)
        assert [None] == [s.holder for s in await store.sessions()]

    async def test_a_lease_alone_is_no_session(self, store: EventLog) -> None:
        """A session leased but never written to has no event, so it is not listed."""
        await store.release_lease(await store.acquire_lease(A, holder("me"), ttl=30))
        await store.acquire_lease(B, holder("me"), ttl=30)
        assert [] == await store.sessions()

    async def test_control_requests_before_any_checkpoint_mark_the_summary(
        self, store: EventLog
    ) -> None:
        """A stop or a pause of a session that never checkpointed shows at once (a resume
        request clears a pause); its first checkpoint says the rest."""
        await store.append([control(A, "stop"), control(B, "pause"), control(C, "pause")])
        await store.append([control(C, "resume"), control(D, "wake")])
        flags = {s.key: (s.paused, s.stopped) for s in await store.sessions()}
        assert {A: (False, True), B: (True, False), C: (False, False), D: (False, False)} == flags
        await store.append([checkpoint(A), checkpoint(B)])
        flags = {s.key: (s.paused, s.stopped) for s in await store.sessions()}
        assert (False, False) == flags[A] == flags[B]

    async def test_a_session_without_a_checkpoint_is_never_due_nor_claimed(
        self, store: EventLog, clock
    ) -> None:
        """Without a checkpoint there is no goal to resume from: due_sessions and claim_due
        (interrupted ones too) leave such a session alone."""
        await store.append([user(A), control(A, "wake"), Event.create(B, InboxQueued("m", "x"))])
        assert [] == await store.due_sessions(clock.now + timedelta(days=1))
        claims = await store.claim_due(clock.now, holder("me"), 30, limit=5, interrupted=True)
        assert [] == claims

    async def test_later_checkpoint_replaces_summary(self, store: EventLog) -> None:
        """A newer checkpoint of a session replaces its summary and moves it to the front."""
        await store.append([checkpoint(A, 1), checkpoint(B, 1)])
        latest = (await add(store, [user(A), checkpoint(A, 2, stop_reason="completed")]))[-1]
        summaries = await store.sessions()
        assert [A, B] == [summary.key for summary in summaries]
        assert (2, "completed", latest.seq) == (
            summaries[0].turns,
            summaries[0].stop_reason,
            summaries[0].checkpoint_seq,
        )

    async def test_paused_and_stopped_come_from_the_latest_checkpoint(
        self, store: EventLog
    ) -> None:
        """A summary says whether its checkpoint was written parked by a pause, or stopped."""
        await store.append([checkpoint(A, paused=True), checkpoint(B, stopped=True)])
        await store.append([checkpoint(C, 1, paused=True), checkpoint(C, 2)])
        flags = {s.key: (s.paused, s.stopped) for s in await store.sessions()}
        assert {A: (True, False), B: (False, True), C: (False, False)} == flags

    async def test_control_requests_after_the_checkpoint_mark_the_summary(
        self, store: EventLog, clock
    ) -> None:
        """A stop or pause of a session that is not running shows at once and sticks: a stop
        keeps it from being due, a pause shows until a resume request clears it; the next
        checkpoint says the rest."""
        past = clock.now - timedelta(hours=1)
        await store.append(
            [checkpoint(k, stop_reason="deferred", next_wake_at=past) for k in (A, B, C)]
        )
        await store.append([control(A, "stop"), control(B, "pause"), control(C, "pause")])
        await store.append([control(C, "resume"), control(C, "wake"), control(D, "stop")])
        flags = {s.key: (s.paused, s.stopped) for s in await store.sessions()}
        assert {A: (False, True), B: (True, False), C: (False, False), D: (False, True)} == flags
        due = {s.key: s.paused for s in await store.due_sessions(clock.now)}
        assert {B: True, C: False} == due
        await store.append([checkpoint(A, 2), checkpoint(B, 2)])  # a forced resume, an unpause
        flags = {s.key: (s.paused, s.stopped) for s in await store.sessions()}
        assert (False, False) == flags[A] == flags[B]

    async def test_unpriced_comes_from_the_latest_checkpoint(self, store: EventLog) -> None:
        """A run with no prices for its model says so; the next checkpoint says again."""
        await store.append([checkpoint(A, unpriced=True), checkpoint(B)])
        await store.append([checkpoint(C, 1, unpriced=True), checkpoint(C, 2)])
        flags = {s.key: s.unpriced for s in await store.sessions()}
        assert {A: True, B: False, C: False} == flags

    async def test_tokens_come_from_the_latest_checkpoint(self, store: EventLog, clock) -> None:
        """A summary carries the latest checkpoint's input tokens and their cached share, in
        sessions, due_sessions and a claim alike; a checkpoint without a cache says 0."""

        def tokens(key: SessionKey, turns: int, used: int, cached: int) -> Event:
            wake = clock.now - timedelta(minutes=turns)
            payload = Checkpoint(
                turns, used, 5, 0.25, "go", stop_reason="deferred", next_wake_at=wake,
                cached_input_tokens=cached,
            )  # fmt: skip
            return Event.create(key, payload)

        await store.append([tokens(A, 1, 1_000, 0), tokens(B, 1, 700, 0)])
        await store.append([tokens(A, 2, 12_400, 11_904), control(B, "wake")])
        expected = {A: (12_400, 11_904), B: (700, 0)}
        listed = {s.key: (s.input_tokens, s.cached_input_tokens) for s in await store.sessions()}
        assert expected == listed
        due = await store.due_sessions(clock.now)
        assert expected == {s.key: (s.input_tokens, s.cached_input_tokens) for s in due}
        claims = await store.claim_due(clock.now, holder("me"), 30, limit=2)
        assert expected == {
            c.summary.key: (c.summary.input_tokens, c.summary.cached_input_tokens) for c in claims
        }

    async def test_a_stop_in_the_batch_of_its_checkpoint(self, store: EventLog) -> None:
        """Marks come in append order: a stop after a checkpoint in one batch sticks, one
        before it is the checkpoint's to say."""
        await store.append([checkpoint(A), control(A, "stop")])
        await store.append([control(B, "stop"), checkpoint(B)])
        flags = {s.key: s.stopped for s in await store.sessions()}
        assert {A: True, B: False} == flags

    async def test_names_live_holder(self, store: EventLog, clock) -> None:
        """A live lease shows as the session's holder; an expired one does not."""
        await store.append([checkpoint(A)])
        owner = holder("owner")
        await store.acquire_lease(A, owner, ttl=30)
        assert [str(owner)] == [summary.holder for summary in await store.sessions()]
        clock.advance(31)
        assert [None] == [summary.holder for summary in await store.sessions()]


class TestDueSessions:
    """due_sessions: deferred sessions whose wake time has come."""

    async def test_due_not_due_and_ended(self, store: EventLog, clock) -> None:
        """Only deferred sessions woken by ``now`` are due, the earliest wake first."""
        now = clock.now
        await store.append(
            [
                checkpoint(A, stop_reason="deferred", next_wake_at=now - timedelta(minutes=5)),
                checkpoint(B, stop_reason="deferred", next_wake_at=now + timedelta(minutes=5)),
                checkpoint(C, stop_reason="completed"),
                checkpoint(D, stop_reason="deferred", next_wake_at=now - timedelta(minutes=9)),
            ]
        )
        assert [D, A] == [summary.key for summary in await store.due_sessions(now)]

    async def test_wake_time_equal_to_now_is_due(self, store: EventLog, clock) -> None:
        """A session is due at exactly its wake time."""
        await store.append([checkpoint(A, stop_reason="deferred", next_wake_at=clock.now)])
        assert [A] == [summary.key for summary in await store.due_sessions(clock.now)]

    async def test_latest_checkpoint_decides(self, store: EventLog, clock) -> None:
        """A session that deferred and then ran to completion is not due."""
        past = clock.now - timedelta(hours=1)
        await store.append([checkpoint(A, 1, stop_reason="deferred", next_wake_at=past)])
        await store.append([checkpoint(A, 2, stop_reason="completed")])
        assert [] == await store.due_sessions(clock.now)

    async def test_stopped_session_is_never_due(self, store: EventLog, clock) -> None:
        """A session stopped on purpose during a sleep keeps its wake time but is not due."""
        past = clock.now - timedelta(hours=1)
        await store.append(
            [
                checkpoint(A, stop_reason="deferred", next_wake_at=past, stopped=True),
                checkpoint(B, stop_reason="deferred", next_wake_at=past, paused=True),
            ]
        )
        assert [B] == [summary.key for summary in await store.due_sessions(clock.now)]
        (stopped,) = [summary for summary in await store.sessions() if summary.key == A]
        assert (past, True) == (stopped.next_wake_at, stopped.stopped)

    async def test_running_session_is_not_due(self, store: EventLog, clock) -> None:
        """A checkpoint with no stop reason (a run going on) is never due."""
        past = clock.now - timedelta(hours=1)
        await store.append([checkpoint(A, next_wake_at=past)])
        assert [] == await store.due_sessions(clock.now)


class TestWakeRequests:
    """A wake request after a deferred checkpoint makes the session due at once: its summary's
    wake time becomes the request's time when that is earlier; the log is left as it is."""

    async def test_a_wake_makes_a_deferred_session_due_and_claimable(
        self, store: EventLog, clock
    ) -> None:
        """A session deferred for an hour and woken is due, and claimed, now; one deferred
        as long and not woken is not."""
        later = clock.now + timedelta(hours=1)
        await store.append([deferred(A, later), deferred(B, later)])
        await store.append([wake(A, clock.now)])
        due = await store.due_sessions(clock.now)
        assert [(A, clock.now)] == [(s.key, s.next_wake_at) for s in due]
        claims = await store.claim_due(clock.now, holder("me"), 30, limit=5)
        assert [(A, clock.now)] == [(c.summary.key, c.summary.next_wake_at) for c in claims]

    async def test_a_wake_is_not_due_before_its_own_time(self, store: EventLog, clock) -> None:
        """The request's time is the wake time: not due before it, due from it on."""
        await store.append([deferred(A, clock.now + timedelta(hours=1))])
        await store.append([wake(A, clock.now + timedelta(minutes=1))])
        assert [] == await store.due_sessions(clock.now)
        assert [] == await store.claim_due(clock.now, holder("me"), 30, limit=5)
        clock.advance(60)
        assert [A] == [s.key for s in await store.due_sessions(clock.now)]
        assert [A] == [
            c.summary.key for c in await store.claim_due(clock.now, holder("me"), 30, limit=5)
        ]

    async def test_a_wake_never_moves_the_wake_time_later(self, store: EventLog, clock) -> None:
        """A wake later than the wake time leaves it; of several wakes, the earliest wins."""
        soon, past = clock.now + timedelta(minutes=5), clock.now - timedelta(minutes=5)
        await store.append([deferred(A, past), deferred(B, clock.now + timedelta(hours=1))])
        await store.append([wake(A, clock.now), wake(B, soon)])
        await store.append([wake(B, clock.now + timedelta(minutes=30)), wake(A, clock.now)])
        wakes = {s.key: s.next_wake_at for s in await store.sessions()}
        assert {A: past, B: soon} == wakes

    async def test_a_deferred_session_without_a_wake_time_is_woken(
        self, store: EventLog, clock
    ) -> None:
        """A session deferred with no wake time waits for ever, or until a wake, in another
        batch or in its checkpoint's."""
        await store.append([deferred(A, None), deferred(B, None), wake(B, clock.now)])
        assert [B] == [s.key for s in await store.due_sessions(clock.now)]
        await store.append([wake(A, clock.now)])
        wakes = {s.key: s.next_wake_at for s in await store.sessions()}
        assert {A: clock.now, B: clock.now} == wakes

    async def test_a_wake_of_a_session_not_deferred_changes_nothing(
        self, store: EventLog, clock
    ) -> None:
        """Completed, running (even with a wake time), or without a checkpoint: a wake leaves
        the summary as it was (but that the wake is the newest event of a session without a
        checkpoint), and the session is neither due nor claimed."""
        past = clock.now - timedelta(hours=1)
        await store.append(
            [checkpoint(A, stop_reason="completed"), checkpoint(B, next_wake_at=clock.now), user(C)]
        )
        before = {s.key: s for s in await store.sessions()}
        await store.append([wake(A, past), wake(B, past), wake(C, past)])
        expected = {**before, C: attrs.evolve(before[C], updated_at=past)}
        assert expected == {s.key: s for s in await store.sessions()}
        assert [] == await store.due_sessions(clock.now)
        assert [] == await store.claim_due(clock.now, holder("me"), 30, limit=5)

    async def test_a_stopped_session_stays_not_due(self, store: EventLog, clock) -> None:
        """Stopped by its checkpoint, or by a request before the wake or after it in the same
        batch: never due nor claimed; a wake after the stop leaves the wake time as it was."""
        later = clock.now + timedelta(hours=1)
        await store.append(
            [deferred(A, later, stopped=True), deferred(B, later), deferred(C, later)]
        )
        await store.append([control(B, "stop")])
        await store.append(
            [wake(A, clock.now), wake(B, clock.now), wake(C, clock.now), control(C, "stop")]
        )
        assert [] == await store.due_sessions(clock.now)
        assert [] == await store.claim_due(clock.now, holder("me"), 30, limit=5)
        wakes = {s.key: (s.next_wake_at, s.stopped) for s in await store.sessions()}
        assert {A: (later, True), B: (later, True), C: (clock.now, True)} == wakes

    async def test_a_paused_session_woken_is_due_but_not_claimed(
        self, store: EventLog, clock
    ) -> None:
        """A wake does not undo a pause: due (the caller decides), not claimed."""
        await store.append([deferred(A, clock.now + timedelta(hours=1)), control(A, "pause")])
        await store.append([wake(A, clock.now)])
        assert [(A, True)] == [(s.key, s.paused) for s in await store.due_sessions(clock.now)]
        assert [] == await store.claim_due(clock.now, holder("me"), 30, limit=5)

    async def test_the_checkpoint_in_the_log_keeps_its_wake_time(
        self, store: EventLog, clock
    ) -> None:
        """Only the summary moves: the latest checkpoint, read or listed, says its own time."""
        later = clock.now + timedelta(hours=1)
        await store.append([deferred(A, later)])
        await store.append([wake(A, clock.now)])
        latest = await store.latest_checkpoint(A)
        assert latest is not None
        (listed,) = await store.sessions()
        assert listed.checkpoint is not None
        assert (later, later, clock.now) == (
            checkpoint_of(latest).next_wake_at,
            listed.checkpoint.next_wake_at,
            listed.next_wake_at,
        )

    async def test_a_later_checkpoint_replaces_the_woken_summary(
        self, store: EventLog, clock
    ) -> None:
        """The run the wake started defers again: its checkpoint's wake time is the summary's."""
        await store.append([deferred(A, clock.now + timedelta(hours=1))])
        await store.append([wake(A, clock.now)])
        again = clock.now + timedelta(hours=2)
        await store.append([deferred(A, again, turns=2)])
        assert [again] == [s.next_wake_at for s in await store.sessions()]
        assert [] == await store.due_sessions(clock.now)

    async def test_a_wake_in_the_batch_of_its_checkpoint(self, store: EventLog, clock) -> None:
        """Marks come in append order: a wake after a deferred checkpoint in one batch wakes
        it, one before it is the checkpoint's to say."""
        later = clock.now + timedelta(hours=1)
        await store.append([deferred(A, later), wake(A, clock.now)])
        await store.append([wake(B, clock.now), deferred(B, later)])
        wakes = {s.key: s.next_wake_at for s in await store.sessions()}
        assert {A: clock.now, B: later} == wakes
        assert [A] == [s.key for s in await store.due_sessions(clock.now)]


class TestSummaryIsTheLogFolded:
    """Every store keeps the summary the pure rules fold from the session's events."""

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        batches=st.lists(
            st.lists(summary_events(A, START), min_size=1, max_size=3), min_size=1, max_size=6
        )
    )
    async def test_any_history_in_any_batches(
        self, store: EventLog, clock, batches: list[list[Event]]
    ) -> None:
        """Checkpoints, stops, pauses, resumes and wakes, appended in batches of any shape:
        the listed summary, and whether it is due, are the fold of ``_rules`` over the log."""
        key = SessionKey("app", "fold", new_event_id())  # a session of this example alone
        batches = [[attrs.evolve(event, key=key) for event in batch] for batch in batches]
        appended = [event for batch in batches for event in await add(store, batch)]
        expected = folded(key, appended)
        assert [expected] == [s for s in await store.sessions() if s.key == key]
        due = [s.key for s in await store.due_sessions(clock.now) if s.key == key]
        assert is_due(expected, clock.now) == (due == [key])


class TestLeases:
    """Session leases: one live holder at a time."""

    async def test_acquire_free_session(self, store: EventLog, clock) -> None:
        """A free session's lease is granted until now + ttl."""
        me = holder("me")
        lease = await store.acquire_lease(A, me, ttl=30)
        assert (A, me, clock.now + timedelta(seconds=30)) == (
            lease.key,
            lease.holder,
            lease.expires_at,
        )

    async def test_lease_tells_the_newest_seq_of_the_whole_log(self, store: EventLog) -> None:
        """log_seq is the newest seq of any session when the lease was taken (0: empty log);
        a renewal keeps it."""
        assert 0 == (await store.acquire_lease(C, holder("me"), ttl=30)).log_seq
        await store.append([user(A), answer(A)])
        newest = (await store.append([user(B)]))[-1]
        lease = await store.acquire_lease(A, holder("me"), ttl=30)
        assert newest == lease.log_seq
        await store.append([user(A)])
        assert newest == (await store.renew_lease(lease, ttl=30)).log_seq

    async def test_held_session_is_locked_naming_holder(self, store: EventLog) -> None:
        """Asking for a held lease raises SessionLocked naming the session and the holder."""
        first = holder("first")
        await store.acquire_lease(A, first, ttl=30)
        with pytest.raises(SessionLocked) as caught:
            await store.acquire_lease(A, holder("second"), ttl=30)
        assert (str(A), str(first)) == (caught.value.session, caught.value.holder)
        assert str(first) in str(caught.value)

    async def test_holder_may_reacquire(self, store: EventLog, clock) -> None:
        """The holder asking again gets its lease back, extended."""
        me = holder("me")
        await store.acquire_lease(A, me, ttl=30)
        clock.advance(10)
        lease = await store.acquire_lease(A, me, ttl=30)
        assert clock.now + timedelta(seconds=30) == lease.expires_at

    async def test_leases_are_per_session(self, store: EventLog) -> None:
        """Holding one session does not lock another."""
        await store.acquire_lease(A, holder("one"), ttl=30)
        lease = await store.acquire_lease(B, holder("two"), ttl=30)
        assert B == lease.key

    async def test_takeover_after_expiry(self, store: EventLog, clock) -> None:
        """Once the ttl has passed, another holder takes the lease."""
        await store.acquire_lease(A, holder("old"), ttl=30)
        clock.advance(29)
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, holder("new"), ttl=30)
        clock.advance(1)
        lease = await store.acquire_lease(A, holder("new"), ttl=30)
        assert holder("new") == lease.holder

    async def test_dead_holder_on_this_host_is_taken_over_at_once(
        self, store: EventLog, dead_pid: int
    ) -> None:
        """A holder on this host whose process is gone loses its lease before it expires."""
        ghost = holder("ghost", host=socket.gethostname(), pid=dead_pid)
        await store.acquire_lease(A, ghost, ttl=3600)
        me = LeaseHolder.this_process()
        assert me == (await store.acquire_lease(A, me, ttl=30)).holder

    async def test_live_holder_on_this_host_is_never_displaced(self, store: EventLog) -> None:
        """A live process of this host keeps its lease until it expires."""
        alive = holder("alive", host=socket.gethostname(), pid=os.getpid())
        await store.acquire_lease(A, alive, ttl=3600)
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, LeaseHolder.this_process(), ttl=30)

    async def test_holder_on_another_host_is_never_displaced(
        self, store: EventLog, dead_pid: int
    ) -> None:
        """A pid that is dead here says nothing about a holder on another host."""
        remote = holder("remote", host="not-" + socket.gethostname(), pid=dead_pid)
        await store.acquire_lease(A, remote, ttl=3600)
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, holder("me"), ttl=30)

    async def test_renew_extends(self, store: EventLog, clock) -> None:
        """Renewing our lease moves its expiry to now + ttl."""
        lease = await store.acquire_lease(A, holder("me"), ttl=30)
        clock.advance(20)
        renewed = await store.renew_lease(lease, ttl=30)
        assert clock.now + timedelta(seconds=30) == renewed.expires_at
        clock.advance(20)
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, holder("other"), ttl=30)

    async def test_renew_after_takeover_is_lost(self, store: EventLog, clock) -> None:
        """Renewing a lease another holder took over raises LeaseLost."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        clock.advance(31)
        await store.acquire_lease(A, holder("other"), ttl=30)
        with pytest.raises(LeaseLost) as caught:
            await store.renew_lease(mine, ttl=30)
        assert str(A) == caught.value.session

    async def test_renew_after_release_is_lost(self, store: EventLog) -> None:
        """Renewing a released lease raises LeaseLost."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        await store.release_lease(mine)
        with pytest.raises(LeaseLost):
            await store.renew_lease(mine, ttl=30)

    async def test_release_frees_session(self, store: EventLog) -> None:
        """After release, anyone may take the lease."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        await store.release_lease(mine)
        await store.release_lease(mine)
        assert holder("next") == (await store.acquire_lease(A, holder("next"), ttl=30)).holder

    async def test_release_drops_only_own_lease(self, store: EventLog, clock) -> None:
        """Releasing a lease that was taken over leaves the new holder in place."""
        old = await store.acquire_lease(A, holder("old"), ttl=30)
        clock.advance(31)
        await store.acquire_lease(A, holder("new"), ttl=30)
        await store.release_lease(old)
        with pytest.raises(SessionLocked) as caught:
            await store.acquire_lease(A, holder("third"), ttl=30)
        assert str(holder("new")) == caught.value.holder

    async def test_append_and_release_does_both(self, store: Any) -> None:
        """append_and_release appends the batch, in order, and frees the session."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        seqs = await store.append_and_release([answer(A), checkpoint(A)], mine)
        assert seqs == [e.seq for e in await store.read(A)]
        assert EventKind.CHECKPOINT == (await store.latest_checkpoint(A)).kind
        assert holder("next") == (await store.acquire_lease(A, holder("next"), ttl=30)).holder

    async def test_append_and_release_leaves_another_holders_lease(self, store: Any, clock) -> None:
        """A lease taken over meanwhile is not ours to drop, nor to write under: LeaseLost,
        nothing lands, the new holder keeps the session."""
        old = await store.acquire_lease(A, holder("old"), ttl=30)
        clock.advance(31)
        await store.acquire_lease(A, holder("new"), ttl=30)
        with pytest.raises(LeaseLost):
            await store.append_and_release([checkpoint(A)], old)
        assert [] == await store.read(A)
        with pytest.raises(SessionLocked) as caught:
            await store.acquire_lease(A, holder("third"), ttl=30)
        assert str(holder("new")) == caught.value.holder

    async def test_append_and_release_is_all_or_nothing(self, store: Any) -> None:
        """A batch that cannot be stored writes nothing and keeps the lease held."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        bad = Event(key=A, kind=EventKind.CHECKPOINT, payload=Note("not a checkpoint"))
        with pytest.raises(TypeError):
            await store.append_and_release([user(A), bad], mine)
        assert [] == await store.read(A)
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, holder("other"), ttl=30)

    async def test_append_and_release_of_nothing_releases(self, store: Any) -> None:
        """An empty batch appends nothing and still frees the session."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        assert [] == await store.append_and_release([], mine)
        assert holder("next") == (await store.acquire_lease(A, holder("next"), ttl=30)).holder

    @pytest.mark.parametrize("ttl", [0, -1.0])
    async def test_ttl_must_be_positive(self, store: EventLog, ttl: float) -> None:
        """A lease for no time at all is a misuse."""
        with pytest.raises(ValueError, match="ttl"):
            await store.acquire_lease(A, holder("me"), ttl=ttl)


class TestLeaseEpochs:
    """Every new holder of a session gets a larger epoch; epochs never repeat."""

    async def test_takeover_bumps_the_epoch(self, store: EventLog, clock) -> None:
        """A holder that takes an expired lease over gets a larger epoch than the last one."""
        first = await store.acquire_lease(A, holder("a"), ttl=30)
        clock.advance(31)
        second = await store.acquire_lease(A, holder("b"), ttl=30)
        assert 0 < first.epoch < second.epoch

    async def test_the_holder_keeps_its_epoch(self, store: EventLog, clock) -> None:
        """Acquiring again while holding it, and renewing, keep the epoch."""
        me = holder("me")
        first = await store.acquire_lease(A, me, ttl=30)
        clock.advance(10)
        again = await store.acquire_lease(A, me, ttl=30)
        renewed = await store.renew_lease(again, ttl=30)
        assert [first.epoch] * 3 == [first.epoch, again.epoch, renewed.epoch]

    async def test_epochs_never_repeat_after_a_release(self, store: EventLog) -> None:
        """A session released and taken again, even by the same holder, counts on upwards."""
        me = holder("me")
        epochs = []
        for name in ("me", "other", "me"):
            lease = await store.acquire_lease(A, me if name == "me" else holder(name), ttl=30)
            epochs.append(lease.epoch)
            await store.release_lease(lease)
        assert sorted(set(epochs)) == epochs

    async def test_epochs_are_per_session(self, store: EventLog) -> None:
        """Another session's holders do not move this session's epoch."""
        first = await store.acquire_lease(A, holder("a"), ttl=30)
        await store.acquire_lease(B, holder("b"), ttl=30)
        await store.release_lease(first)
        assert first.epoch + 1 == (await store.acquire_lease(A, holder("c"), ttl=30)).epoch

    async def test_renew_of_an_older_epoch_is_lost(self, store: EventLog, clock) -> None:
        """A lease the same holder took again after a takeover is not the old lease any more."""
        me = holder("me")
        old = await store.acquire_lease(A, me, ttl=30)
        clock.advance(31)
        await store.release_lease(await store.acquire_lease(A, holder("other"), ttl=30))
        new = await store.acquire_lease(A, me, ttl=30)
        with pytest.raises(LeaseLost):
            await store.renew_lease(old, ttl=30)
        await store.release_lease(old)  # the old lease cannot drop the new one
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, holder("third"), ttl=30)
        assert new.epoch == (await store.renew_lease(new, ttl=30)).epoch

    def test_positional_construction_still_works(self, clock) -> None:
        """Lease(key, holder, expires_at) builds a lease of epoch 0 with no log seq."""
        lease = Lease(A, holder("me"), clock.now)
        assert (None, 0) == (lease.log_seq, lease.epoch)


class TestFencedAppend:
    """append(..., lease=...) lands only while the lease is the session's: holder and epoch."""

    async def test_stale_holder_writes_nothing(self, store: Any, clock) -> None:
        """A holder whose lease expired and was taken over writes nothing more; the new one
        writes, and keeps its lease when the old one tries to release with a last batch."""
        stale = await store.acquire_lease(A, holder("a"), ttl=30)
        clock.advance(31)
        fresh = await store.acquire_lease(A, holder("b"), ttl=30)
        with pytest.raises(LeaseLost) as caught:
            await store.append([user(A, "from a"), checkpoint(A)], lease=stale)
        assert str(A) == caught.value.session
        assert str(holder("b")) in str(caught.value)
        written = await add_fenced(store, [user(A, "from b")], fresh)
        with pytest.raises(LeaseLost):
            await store.append_and_release([checkpoint(A, 9)], stale)
        assert written == await store.read(A)
        assert None is await store.latest_checkpoint(A)
        with pytest.raises(SessionLocked) as locked:
            await store.acquire_lease(A, holder("c"), ttl=30)
        assert str(holder("b")) == locked.value.holder
        assert fresh.epoch == (await store.renew_lease(fresh, ttl=30)).epoch

    async def test_held_lease_writes(self, store: EventLog, clock) -> None:
        """The holder's fenced appends land, after a renewal too, even once its ttl passed
        (nobody took it over)."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        first = await add_fenced(store, [user(A), checkpoint(A)], mine)
        mine = await store.renew_lease(mine, ttl=30)
        clock.advance(60)
        later = await add_fenced(store, [answer(A)], mine)
        assert first + later == await store.read(A)

    async def test_released_lease_writes_nothing(self, store: EventLog) -> None:
        """A fenced append after our own release raises LeaseLost."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        await store.release_lease(mine)
        with pytest.raises(LeaseLost, match="released"):
            await store.append([user(A)], lease=mine)
        assert [] == await store.read(A)

    async def test_never_granted_lease_writes_nothing(self, store: EventLog, clock) -> None:
        """A lease the store never gave (no lease row at all) fences everything out."""
        made_up = Lease(A, holder("me"), clock.now, epoch=1)
        with pytest.raises(LeaseLost):
            await store.append([user(A)], lease=made_up)
        assert [] == await store.read(A)

    async def test_unfenced_append_beside_a_holder(self, store: EventLog) -> None:
        """Without a lease anyone may append to a held session (inject, remote control)."""
        await store.acquire_lease(A, holder("runner"), ttl=30)
        injected = await add(store, [user(A, "from the CLI")])
        assert injected == await store.read(A)

    @pytest.mark.parametrize("keys", [(B,), (A, B)], ids=["other", "mixed"])
    async def test_batch_of_another_session_is_refused(
        self, store: Any, keys: tuple[SessionKey, ...]
    ) -> None:
        """Every event of a fenced batch must be of the lease's session: ValueError, nothing
        written, the lease still held."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        batch = [user(key) for key in keys]
        with pytest.raises(ValueError, match="fenced"):
            await store.append(batch, lease=mine)
        with pytest.raises(ValueError, match="fenced"):
            await store.append_and_release(batch, mine)
        assert ([], []) == (await store.read(A), await store.read(B))
        assert mine.epoch == (await store.renew_lease(mine, ttl=30)).epoch

    async def test_empty_fenced_batch(self, store: EventLog) -> None:
        """A fenced append of nothing appends nothing, lease held or not."""
        mine = await store.acquire_lease(A, holder("me"), ttl=30)
        assert [] == await store.append([], lease=mine)


class TestLeaseHolderProcess:
    """A holder of this host is gone when its pid is a zombie or now names another process."""

    async def test_zombie_holder_is_taken_over_at_once(self, store: EventLog, zombie: int) -> None:
        """A holder that exited but was not reaped yet loses its lease before it expires."""
        ghost = holder("ghost", host=socket.gethostname(), pid=zombie)
        await store.acquire_lease(A, ghost, ttl=3600)
        me = LeaseHolder.this_process()
        assert me == (await store.acquire_lease(A, me, ttl=30)).holder

    async def test_reused_pid_is_taken_over_at_once(self, store: EventLog) -> None:
        """A holder whose pid lives but started at another time (a reused pid) is gone."""
        ghost = LeaseHolder(socket.gethostname(), os.getpid(), "ghost", started="1")
        await store.acquire_lease(A, ghost, ttl=3600)
        me = LeaseHolder.this_process()
        assert me == (await store.acquire_lease(A, me, ttl=30)).holder

    async def test_live_holder_with_its_start_time_keeps_it(self, store: EventLog) -> None:
        """This very process, recorded with its start time, keeps its lease."""
        live = LeaseHolder.this_process()
        assert live.started
        await store.acquire_lease(A, live, ttl=3600)
        with pytest.raises(SessionLocked):
            await store.acquire_lease(A, LeaseHolder.this_process(), ttl=30)


class TestLifecycle:
    """Opening and closing a store."""

    async def test_is_an_event_log(self, store: EventLog) -> None:
        """Both stores satisfy the runtime-checkable protocol."""
        assert isinstance(store, EventLog)

    async def test_aclose_is_idempotent_and_final(self, store: EventLog) -> None:
        """Closing twice is harmless; a closed store refuses further calls."""
        await store.aclose()
        await store.aclose()
        with pytest.raises(StoreUnavailable, match="closed"):
            await store.append([user(A)])


class TestProtocolOwnMembers:
    """The members the EventLog protocol gives a store that subclasses it: append_and_release
    as the two calls, and a watch that never wakes (no notifications: readers poll)."""

    async def test_its_append_and_release_appends_then_releases(self, clock: FakeClock) -> None:
        """The protocol's append_and_release appends fenced by the lease, then releases it."""

        calls: list[str] = []

        class Recording(MemoryEventLog):
            async def append(self, events: Any, *, lease: Lease | None = None) -> list[int]:
                calls.append("append" if lease is not None else "unfenced append")
                return await super().append(events, lease=lease)

            async def release_lease(self, lease: Lease) -> None:
                calls.append("release_lease")
                await super().release_lease(lease)

        log = Recording(clock=clock)
        mine = await log.acquire_lease(A, holder("me"), ttl=30)
        seqs = await EventLog.append_and_release(log, [answer(A), checkpoint(A)], mine)
        assert (["append", "release_lease"], seqs) == (
            calls,
            [e.seq for e in await log.read(A)],
        )
        assert holder("next") == (await log.acquire_lease(A, holder("next"), ttl=30)).holder

    @pytest.mark.parametrize("kind", ["memory", "sqlite"])
    async def test_a_store_that_does_not_notify_has_a_watch_that_never_wakes(
        self, kind: str, db_path: Any, clock: FakeClock
    ) -> None:
        """Memory and SQLite stores notify nobody: their watch (of a session, or of every
        session) is open and waits until cancelled, whatever is appended meanwhile."""
        log: EventLog = MemoryEventLog(clock=clock) if kind == "memory" else SqliteEventLog(db_path)
        woken: list[SessionKey | None] = []
        async with log.watch(A) as one, log.watch() as every, anyio.create_task_group() as tg:

            async def wait(key: SessionKey | None, watch: Any) -> None:
                await watch.wait()
                woken.append(key)

            tg.start_soon(wait, A, one)
            tg.start_soon(wait, None, every)
            await anyio.wait_all_tasks_blocked()
            await log.append([control(A, "stop"), checkpoint(A)])
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        await log.aclose()
        assert [] == woken


class TestStoredRoundTrip:
    """Every payload kind comes back from a store as it went in."""

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(batch=st.lists(events(), min_size=1, max_size=4))
    async def test_events_read_back_equal(self, store: EventLog, batch: list[Event]) -> None:
        """An appended batch reads back, event by event, as it was given, with its seqs."""
        appended = await add(store, batch)
        for event in appended:
            assert [event] == await store.read(event.key, after_seq=event.seq - 1, limit=1)

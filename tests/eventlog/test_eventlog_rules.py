"""The pure rules both stores share: lease takeover, session summaries, due sessions."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventlog import Checkpoint, Control, Event, LeaseHolder, Note, SessionKey, SessionSummary
from eventlog._process import process_start
from eventlog._rules import (
    NO_MARKS,
    Marks,
    as_utc,
    control_marks,
    is_due,
    lease_expiry,
    may_take_lease,
    process_alive,
    prunable,
    summary_before_checkpoint,
    summary_of,
    with_marks,
)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)
HOST = "this-host"
KEY = SessionKey("app", "ops", "a")
ME = LeaseHolder(HOST, 100, "me")


def alive(pid: int, started: str) -> bool:
    return pid != 666 and started != "reused"


class TestMayTakeLease:
    """may_take_lease: free, ours, expired or dead-here is takeable; a live holder is not."""

    def test_free(self) -> None:
        """Nobody holds the lease."""
        assert may_take_lease(None, None, ME, NOW, this_host=HOST, alive=alive)

    def test_ours(self) -> None:
        """We hold it already."""
        assert may_take_lease(ME, LATER, ME, NOW, this_host=HOST, alive=alive)

    def test_expired(self) -> None:
        """Its expiry has come (an expiry equal to now counts)."""
        other = LeaseHolder("far", 1, "other")
        assert may_take_lease(other, NOW, ME, NOW, this_host=HOST, alive=alive)

    def test_dead_process_here(self) -> None:
        """Its holder was a process of this host that is gone."""
        ghost = LeaseHolder(HOST, 666, "ghost")
        assert may_take_lease(ghost, LATER, ME, NOW, this_host=HOST, alive=alive)

    def test_reused_pid_here(self) -> None:
        """Its holder's pid lives on this host, but started at another time: another process."""
        ghost = LeaseHolder(HOST, 200, "ghost", started="reused")
        assert may_take_lease(ghost, LATER, ME, NOW, this_host=HOST, alive=alive)

    @pytest.mark.parametrize(
        "holder",
        [
            LeaseHolder(HOST, 200, "live-here"),
            LeaseHolder("far", 666, "dead-pid-elsewhere"),
            LeaseHolder(HOST, 100, "same-process-other-token"),
        ],
    )
    def test_live_holder(self, holder: LeaseHolder) -> None:
        """A live holder before its expiry keeps the lease."""
        assert not may_take_lease(holder, LATER, ME, NOW, this_host=HOST, alive=alive)


class TestProcessAlive:
    """process_alive asks the operating system, and tells a reused pid by its start time."""

    def test_this_process(self) -> None:
        """Our own process is alive, with or without a start time to compare."""
        assert (True, True) == (
            process_alive(os.getpid()),
            process_alive(os.getpid(), process_start(os.getpid())),
        )

    def test_reaped_child(self, dead_pid: int) -> None:
        """A child that exited and was reaped is gone."""
        assert not process_alive(dead_pid)

    def test_zombie_is_gone(self, zombie: int) -> None:
        """A child that exited but is not reaped yet is gone, whatever its start time."""
        assert (False, False) == (
            process_alive(zombie),
            process_alive(zombie, process_start(zombie)),
        )

    def test_other_start_time_is_another_process(self) -> None:
        """A live pid whose start time is not the recorded one is a reused pid: gone."""
        assert not process_alive(os.getpid(), "1")

    @pytest.mark.parametrize("pid", [0, -1])
    def test_nonsense_pid_counts_as_alive(self, pid: int) -> None:
        """A pid that names no single process never frees a lease."""
        assert process_alive(pid)

    def test_without_proc_asks_the_kernel(self, dead_pid: int, tmp_path) -> None:
        """Where /proc is missing, a signal probe decides; a start time cannot be compared."""
        missing = str(tmp_path / "no-proc")
        assert (True, False) == (
            process_alive(os.getpid(), "1", proc=missing),
            process_alive(dead_pid, proc=missing),
        )


class TestProcessStart:
    """process_start and LeaseHolder.this_process: the start time of a process, as text."""

    def test_this_process_records_its_start_time(self) -> None:
        """A holder made for this process carries its start time (clock ticks since boot)."""
        started = LeaseHolder.this_process().started
        assert (True, started) == (started.isdigit(), process_start(os.getpid()))

    def test_unknown_process_has_none(self, dead_pid: int, tmp_path) -> None:
        """A process that does not exist, or a host without /proc, gives an empty start time."""
        missing = str(tmp_path / "no-proc")
        assert ("", "") == (process_start(dead_pid), process_start(os.getpid(), proc=missing))

    def test_str_stays_host_pid_token(self) -> None:
        """The start time is not part of the holder's text form."""
        assert "h:1:t" == str(LeaseHolder("h", 1, "t", started="99"))


class TestLeaseExpiry:
    """lease_expiry: now + ttl, with a positive ttl."""

    def test_adds_ttl(self) -> None:
        """The lease runs out ttl seconds from now."""
        assert NOW + timedelta(seconds=1.5) == lease_expiry(NOW, 1.5)

    def test_naive_now_is_utc(self) -> None:
        """A naive time is taken as UTC."""
        assert LATER == lease_expiry(NOW.replace(tzinfo=None), 30)

    @pytest.mark.parametrize("ttl", [0, -5, float("nan")])
    def test_refuses_empty_ttl(self, ttl: float) -> None:
        """A ttl that is not a positive number is a misuse."""
        with pytest.raises(ValueError, match="ttl"):
            lease_expiry(NOW, ttl)


class TestSummaryOf:
    """summary_of: what a checkpoint says about its session."""

    def test_fields(self) -> None:
        """Totals (tokens too), stop reason and wake time come from the checkpoint, in UTC."""
        wake = datetime(2030, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
        payload = Checkpoint(
            3, 10, 5, 0.5, "go", stop_reason="deferred", next_wake_at=wake, cached_input_tokens=4
        )
        event = Event.create(KEY, payload, at=NOW)
        expected = SessionSummary(
            KEY, 3, 0.5, "deferred", as_utc(wake), NOW, 0, input_tokens=10, cached_input_tokens=4
        )
        assert expected == summary_of(event)

    def test_seq_given_apart(self) -> None:
        """A store that keeps events without their seq passes it along."""
        event = Event.create(KEY, Checkpoint(3, 10, 5, 0.5, "go"), at=NOW)
        assert 42 == summary_of(event, 42).checkpoint_seq

    def test_refuses_other_payloads(self) -> None:
        """Only a checkpoint makes a summary."""
        with pytest.raises(TypeError, match="not a checkpoint"):
            summary_of(Event.create(KEY, Note("hi")))


class TestIsDue:
    """is_due: deferred, with a wake time that has come."""

    def summary(self, reason: str | None, wake: datetime | None) -> SessionSummary:
        return SessionSummary(KEY, 1, 0.0, reason, wake, NOW, 1)

    @pytest.mark.parametrize(
        ("reason", "wake", "expected"),
        [
            ("deferred", NOW - timedelta(seconds=1), True),
            ("deferred", NOW, True),
            ("deferred", NOW + timedelta(microseconds=1), False),
            ("deferred", None, False),
            ("completed", NOW - timedelta(hours=1), False),
            (None, NOW - timedelta(hours=1), False),
        ],
    )
    def test_cases(self, reason: str | None, wake: datetime | None, expected: bool) -> None:
        """Only a deferred session whose wake time is now or past is due."""
        assert expected == is_due(self.summary(reason, wake), NOW)


def request(action: str, at: datetime = NOW) -> Event:
    return Event.create(KEY, Control(action), at=at)


class TestControlMarks:
    """control_marks: what the control requests after a checkpoint say, one request at a time."""

    @pytest.mark.parametrize(
        ("action", "expected"),
        [
            ("stop", Marks(stopped=True)),
            ("pause", Marks(paused=True)),
            ("resume", Marks(paused=False)),
            ("wake", Marks(woken_at=NOW)),
            ("dance", NO_MARKS),
        ],
    )
    def test_one_request(self, action: str, expected: Marks) -> None:
        """A stop stops, a pause or resume sets paused, a wake asks for its own time; an
        action no store knows says nothing."""
        assert expected == control_marks(request(action))

    def test_other_events_say_nothing(self) -> None:
        """Only a control request marks a summary."""
        before = Marks(paused=True, woken_at=NOW)
        assert before is control_marks(Event.create(KEY, Note("hi")), before)

    def test_marks_add_up_in_order(self) -> None:
        """A stop sticks, the last pause or resume wins, the earliest wake wins."""
        marks = NO_MARKS
        for action, at in [("wake", LATER), ("pause", NOW), ("stop", NOW), ("resume", NOW)]:
            marks = control_marks(request(action, at), marks)
        assert Marks(paused=False, stopped=True, woken_at=LATER) == marks
        assert Marks(paused=True, woken_at=NOW) == control_marks(
            request("wake", NOW), Marks(paused=True, woken_at=LATER)
        )
        assert Marks(woken_at=NOW) == control_marks(request("wake", LATER), Marks(woken_at=NOW))

    def test_a_wake_after_a_stop_says_nothing(self) -> None:
        """A stopped session is not woken: the stop came first."""
        assert Marks(stopped=True) == control_marks(request("wake"), Marks(stopped=True))

    def test_a_wake_time_is_utc(self) -> None:
        """A request made in another zone, or naive (UTC), wakes at that instant, in UTC."""
        there = NOW.astimezone(timezone(timedelta(hours=-5)))
        woken = control_marks(request("wake", there)).woken_at
        assert (NOW, UTC) == (woken, woken.tzinfo if woken else None)
        naive = NOW.replace(tzinfo=None)
        assert Marks(woken_at=NOW) == control_marks(request("wake", naive))


class TestWithMarks:
    """with_marks: a summary as the control requests after its checkpoint leave it."""

    def summary(
        self, reason: str | None, wake: datetime | None, *, stopped: bool = False
    ) -> SessionSummary:
        return SessionSummary(KEY, 1, 0.0, reason, wake, NOW, 1, stopped=stopped)

    def test_no_marks_no_change(self) -> None:
        """Without a request the summary is the checkpoint's."""
        summary = self.summary("deferred", LATER)
        assert summary is with_marks(summary, NO_MARKS)

    def test_pause_and_stop(self) -> None:
        """A stop request adds to the checkpoint's stop; a pause or resume replaces its pause."""
        paused = attrs.evolve(self.summary(None, None), paused=True)
        marked = with_marks(paused, Marks(paused=False, stopped=True))
        assert (False, True) == (marked.paused, marked.stopped)
        assert with_marks(paused, Marks(stopped=True)).paused  # a stop alone leaves the pause

    @pytest.mark.parametrize(
        ("reason", "wake", "woken", "expected"),
        [
            ("deferred", LATER, NOW, NOW),
            ("deferred", NOW, LATER, NOW),
            ("deferred", NOW, NOW, NOW),
            ("deferred", None, NOW, NOW),
            ("completed", LATER, NOW, LATER),
            (None, LATER, NOW, LATER),
            (None, None, NOW, None),
            ("deferred", LATER, None, LATER),
        ],
    )
    def test_a_wake_moves_a_deferred_session_earlier(
        self,
        reason: str | None,
        wake: datetime | None,
        woken: datetime | None,
        expected: datetime | None,
    ) -> None:
        """A deferred session's wake time becomes the wake request's when that is earlier (a
        deferred checkpoint without a time waits for ever: any time is earlier); any other
        session's stays."""
        marked = with_marks(self.summary(reason, wake), Marks(woken_at=woken))
        assert expected == marked.next_wake_at

    def test_a_session_its_checkpoint_stopped_is_not_woken(self) -> None:
        """A checkpoint that says stopped came before the wake: it keeps its time."""
        stopped = self.summary("deferred", LATER, stopped=True)
        assert stopped == with_marks(stopped, Marks(woken_at=NOW))

    def test_a_woken_session_is_due(self) -> None:
        """What the daemon asks: woken now, due now."""
        assert is_due(with_marks(self.summary("deferred", LATER), Marks(woken_at=NOW)), NOW)


class TestSummaryBeforeCheckpoint:
    """summary_before_checkpoint: a session known only by its events."""

    def test_fields(self) -> None:
        """No turns, no cost, no stop reason, checkpoint seq 0, its newest event's time in UTC."""
        at = datetime(2030, 1, 1, 17, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
        expected = SessionSummary(KEY, 0, 0.0, None, None, NOW, 0)
        assert (expected, UTC) == (summary_before_checkpoint(KEY, at), NOW.tzinfo)


#: Stop reasons a latest checkpoint may carry (None: none, a run going on or crashed), an
#: unknown one among them.
REASONS = [
    None, "completed", "max_turns_exceeded", "max_tokens_exceeded", "max_cost_exceeded",
    "wallclock_exceeded", "retry_policy_aborted", "aborted", "deferred", "context_cancelled",
    "lease_lost", "from_a_newer_release",
]  # fmt: skip


class TestPrunable:
    """prunable: finished sessions, and with ``interrupted`` the cut-off ones, once quiet."""

    CUT = NOW - timedelta(days=30)
    OLD = NOW - timedelta(days=40)

    def summary(
        self, reason: str | None, *, paused: bool = False, stopped: bool = False
    ) -> SessionSummary:
        return SessionSummary(
            KEY, 1, 0.0, reason, None, self.OLD, 1, paused=paused, stopped=stopped
        )

    @pytest.mark.parametrize(
        ("reason", "flags", "plain", "asked"),
        [
            ("completed", {}, True, True),
            ("retry_policy_aborted", {}, True, True),  # ls: failed
            ("lease_lost", {}, False, True),  # ls: failed
            (None, {}, False, True),  # crashed
            ("context_cancelled", {}, False, True),
            ("deferred", {}, False, False),
            (None, {"paused": True}, False, False),  # an operator's hold
            ("deferred", {"stopped": True}, True, True),
            (None, {"stopped": True}, True, True),
            ("from_a_newer_release", {}, False, False),
        ],
    )
    def test_cases(
        self, reason: str | None, flags: dict[str, bool], plain: bool, asked: bool
    ) -> None:
        """Which quiet sessions a plain prune takes, and which ``interrupted`` adds."""
        summary = self.summary(reason, **flags)
        assert (plain, asked) == (
            prunable(summary, self.OLD, self.CUT),
            prunable(summary, self.OLD, self.CUT, interrupted=True),
        )

    def test_a_session_without_a_checkpoint_is_cut_off(self) -> None:
        """One that never checkpointed is taken on request only; stopped, always."""
        bare = summary_before_checkpoint(KEY, self.OLD)
        stopped = attrs.evolve(bare, stopped=True)
        assert [False, True, True] == [
            prunable(bare, self.OLD, self.CUT),
            prunable(bare, self.OLD, self.CUT, interrupted=True),
            prunable(stopped, self.OLD, self.CUT),
        ]

    @given(
        reason=st.sampled_from(REASONS),
        paused=st.booleans(),
        stopped=st.booleans(),
        newest=st.sampled_from([OLD, CUT, NOW]),
    )
    def test_interrupted_only_adds(
        self, reason: str | None, paused: bool, stopped: bool, newest: datetime
    ) -> None:
        """Asking for interrupted sessions never spares one a plain prune takes, nor takes a
        session written to since the cut-off, nor a deferred one that was not stopped."""
        summary = self.summary(reason, paused=paused, stopped=stopped)
        plain = prunable(summary, newest, self.CUT)
        asked = prunable(summary, newest, self.CUT, interrupted=True)
        assert not plain or asked
        if newest >= self.CUT or (reason == "deferred" and not stopped):
            assert not asked

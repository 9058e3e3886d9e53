"""Pure decisions both stores share: who may take a lease, what a checkpoint says of its session."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import attrs

from ._events import Checkpoint, Control, Event, SessionKey, check_key
from ._process import PROC, kill_probe, process_stat
from ._store import Lease, LeaseHolder, SessionSummary


def as_utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (a naive one is taken to be UTC already)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def lease_expiry(now: datetime, ttl: float) -> datetime:
    """When a lease taken or renewed at ``now`` for ``ttl`` seconds runs out."""
    if not ttl > 0:
        raise ValueError(f"a lease ttl must be a positive number of seconds, not {ttl!r}")
    return as_utc(now) + timedelta(seconds=ttl)


def process_alive(pid: int, started: str = "", *, proc: str = PROC) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs on this host.

    Gone: no such pid, a zombie (it exited, nobody reaped it yet), or a pid whose start time is
    not ``started`` (the pid was given to another process). ``started`` empty: any start time.
    Without ``/proc``, a signal probe decides. ``True`` whenever it cannot be told.
    """
    if pid <= 0:
        return True
    try:
        stat = process_stat(pid, proc)
    except ProcessLookupError:
        return False
    if stat is None:
        return kill_probe(pid)
    state, start = stat
    if state in ("Z", "X"):  # zombie, or dead while being reaped
        return False
    return not started or start == started


def may_take_lease(
    current: LeaseHolder | None,
    expires_at: datetime | None,
    asker: LeaseHolder,
    now: datetime,
    *,
    this_host: str,
    alive: Callable[[int, str], bool] = process_alive,
) -> bool:
    """Whether ``asker`` may take a lease now held by ``current`` until ``expires_at``.

    Free, ours, expired, or held by a process of this host that is gone (a zombie, or a pid
    that now names a process with another start time): yes. A live holder: no.
    """
    if current == asker:
        return True
    return lease_gone(current, expires_at, now, this_host=this_host, alive=alive)


def lease_gone(
    current: LeaseHolder | None,
    expires_at: datetime | None,
    now: datetime,
    *,
    this_host: str,
    alive: Callable[[int, str], bool] = process_alive,
) -> bool:
    """Whether nobody holds a lease now held by ``current`` until ``expires_at``: no holder,
    an expired lease, or a holder of this host that is gone (see :func:`may_take_lease`).

    What :meth:`EventLog.claim_due` takes: unlike :func:`may_take_lease`, a live lease of the
    claimer itself counts as held (a session it runs already is not claimed twice).
    """
    if current is None or expires_at is None:
        return True
    if as_utc(expires_at) <= as_utc(now):
        return True
    return current.host == this_host and not alive(current.pid, current.started)


def checkpoint_of(event: Event) -> Checkpoint:
    """The checkpoint an event carries; :class:`TypeError` when its payload is something else."""
    payload = event.payload
    if not isinstance(payload, Checkpoint):
        name = type(payload).__name__
        raise TypeError(f"event {event.id} ({event.kind}) has a {name} payload, not a checkpoint")
    return payload


def summary_of(event: Event, seq: int | None = None) -> SessionSummary:
    """The session summary a checkpoint event leaves behind.

    ``seq`` is the checkpoint's seq when the event itself does not carry it (a store that keeps
    events as appended, seq aside). Raises :class:`TypeError` for an event that is no checkpoint.
    """
    payload = checkpoint_of(event)
    wake = payload.next_wake_at
    return SessionSummary(
        key=event.key,
        turns=payload.turns,
        cost_usd=payload.cost_usd,
        stop_reason=None if payload.stop_reason is None else str(payload.stop_reason),
        next_wake_at=None if wake is None else as_utc(wake),
        updated_at=as_utc(event.at),
        checkpoint_seq=event.seq if seq is None else seq,
        paused=payload.paused,
        stopped=payload.stopped,
        unpriced=payload.unpriced,
        input_tokens=payload.input_tokens,
        cached_input_tokens=payload.cached_input_tokens,
    )


def summary_before_checkpoint(key: SessionKey, newest_at: datetime) -> SessionSummary:
    """The summary of a session that has events but no checkpoint yet (an inject before any
    run, a note, a run that died before its first checkpoint): no turns, no cost, no stop
    reason, checkpoint seq 0, updated at ``newest_at``, the time of its newest event."""
    return SessionSummary(key, 0, 0.0, None, None, as_utc(newest_at), 0)


@attrs.frozen
class Marks:
    """What the control requests appended after a session's latest checkpoint (or since its
    first event, without one) say of its summary: ``paused`` None when they leave the pause
    as it is, ``stopped`` whether one asked for a stop, ``woken_at`` the time of the earliest
    wake request before any stop (None: no such request). See :func:`control_marks` and
    :func:`with_marks`."""

    paused: bool | None = None
    stopped: bool = False
    woken_at: datetime | None = None


#: No control request since the latest checkpoint.
NO_MARKS = Marks()


def control_marks(event: Event, before: Marks = NO_MARKS) -> Marks:
    """The marks of a session's control requests after its latest checkpoint: ``before``
    (those so far) and then ``event``; any other event leaves them as they are.

    A stop or pause of a session that is not running must show (``ls``) and stick (the daemon
    skips it) before any run reads it, and a wake must make a deferred session due at once (a
    daemon claims it now, not at its wake time), so the summary takes them at append; the
    session's next checkpoint, written by a run that has obeyed them or by a forced resume,
    says the rest. A wake asks for its own time (its event's): the earliest counts, and none
    after a stop (a stopped session is not woken).
    """
    payload = event.payload
    if not isinstance(payload, Control):
        return before
    action = payload.action
    if action == "stop":
        return attrs.evolve(before, stopped=True)
    if action in ("pause", "resume"):
        return attrs.evolve(before, paused=action == "pause")
    if action == "wake" and not before.stopped:
        at = as_utc(event.at)
        if before.woken_at is None or at < before.woken_at:
            return attrs.evolve(before, woken_at=at)
    return before


def with_marks(summary: SessionSummary, marks: Marks) -> SessionSummary:
    """``summary`` (its latest checkpoint's) with the marks of the control requests appended
    after that checkpoint: a stop adds to the checkpoint's, a pause or resume replaces its
    pause, and a wake moves the wake time of a deferred session earlier (:func:`woken_wake`).
    """
    if marks == NO_MARKS:
        return summary
    return attrs.evolve(
        summary,
        paused=summary.paused if marks.paused is None else marks.paused,
        stopped=summary.stopped or marks.stopped,
        next_wake_at=woken_wake(summary, marks.woken_at),
    )


def woken_wake(summary: SessionSummary, woken_at: datetime | None) -> datetime | None:
    """The wake time of ``summary`` after a wake request at ``woken_at`` (None: no request).

    A session whose latest checkpoint deferred it, and did not stop it, wakes at the earlier of
    its wake time and the request's (a deferred checkpoint without a wake time waits for ever:
    the request's is earlier). A wake before any checkpoint, or after one that did not defer,
    or that stopped the session, leaves the wake time as it is: nothing waits for it. Only the
    summary moves; the checkpoint in the log keeps its time. The SQL stores apply this rule
    in their append statements (``_sqlite._schema.MARK_WOKEN``, ``_postgres._sql.APPEND``).
    """
    wake = summary.next_wake_at
    if woken_at is None or summary.stop_reason != "deferred" or summary.stopped:
        return wake
    return woken_at if wake is None or woken_at < wake else wake


def is_due(summary: SessionSummary, now: datetime) -> bool:
    """Whether a session deferred itself to a wake time that has come (and was not stopped).

    A paused one is due too: the caller decides (the daemon shows it paused and leaves it)."""
    return (
        not summary.stopped
        and summary.stop_reason == "deferred"
        and summary.next_wake_at is not None
        and summary.next_wake_at <= as_utc(now)
    )


def is_interrupted(summary: SessionSummary) -> bool:
    """Whether a session's run died mid-way (its latest checkpoint has no stop reason) and it
    was neither stopped nor paused since: what ``claim_due(interrupted=True)`` also takes."""
    return summary.stop_reason is None and not summary.stopped and not summary.paused


def check_claim_limit(limit: int) -> None:
    """Reject a claim of a negative number of sessions (``0`` claims nothing)."""
    if limit < 0:
        raise ValueError(f"a claim's limit must be >= 0 sessions, not {limit}")


#: The stop reasons that end a session: nothing wakes it again (a resume by hand may, with
#: larger budgets). ``deferred`` waits for its wake; ``context_cancelled`` without a stop was
#: its caller's cancellation (a signal, a timeout): interrupted, not finished.
FINISHED_REASONS = frozenset(
    {
        "completed",
        "max_turns_exceeded",
        "max_tokens_exceeded",
        "max_cost_exceeded",
        "wallclock_exceeded",
        "retry_policy_aborted",
        "aborted",
    }
)


def is_finished(summary: SessionSummary) -> bool:
    """Whether a session's latest checkpoint ended it for good (what ``prune`` may drop)."""
    reason = summary.stop_reason
    if reason in FINISHED_REASONS:
        return True
    return summary.stopped  # on purpose, by a checkpoint or a request (only force resumes it)


#: The stop reasons of a run that was cut off rather than ended: its caller's cancellation
#: (a signal, a timeout) and a lease another process took over. Like a checkpoint with no stop
#: reason (a crash), nothing ended the session on purpose and nothing will wake it.
CUT_OFF_REASONS = frozenset({"context_cancelled", "lease_lost"})


def is_cut_off(summary: SessionSummary) -> bool:
    """Whether a session's run was cut off (what ``prune(interrupted=True)`` also drops): no
    checkpoint yet, a latest checkpoint with no stop reason, or one of :data:`CUT_OFF_REASONS`;
    and neither stopped (that is finished) nor paused (an operator's hold, which waits for an
    unpause as a deferred session waits for its wake)."""
    reason = summary.stop_reason
    cut_off = reason is None or reason in CUT_OFF_REASONS
    return cut_off and not summary.stopped and not summary.paused


def prunable(
    summary: SessionSummary, newest: datetime, before: datetime, *, interrupted: bool = False
) -> bool:
    """Whether ``prune(before, interrupted=...)`` takes a session: finished (or, with
    ``interrupted``, cut off), and quiet since before ``before``.

    ``newest`` is the time of the session's newest event (the checkpoint or a later one); a
    session without a checkpoint has that time as its ``updated_at`` too.
    """
    cut = as_utc(before)
    taken = is_finished(summary) or (interrupted and is_cut_off(summary))
    return taken and summary.updated_at < cut and as_utc(newest) < cut


def check_batch_keys(events: Sequence[Event]) -> None:
    """Refuse a batch holding an event of a key no store takes (see :func:`check_key`)."""
    key: SessionKey | None = None
    for event in events:
        if event.key is not key:  # a batch is mostly one session: its key checked once
            key = event.key
            check_key(key)


def check_fenced_batch(events: Sequence[Event], lease: Lease) -> None:
    """Refuse a batch fenced by ``lease`` that holds an event of another session (ValueError)."""
    key = lease.key
    for event in events:
        if event.key is not key and event.key != key:  # mostly the very same key object
            raise ValueError(
                f"an append fenced by the lease of session {key} holds an event of"
                f" session {event.key} ({event.id})"
            )


def check_limit(limit: int | None) -> None:
    """Reject a negative read limit (``None`` means no limit, ``0`` means nothing)."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, not {limit}")

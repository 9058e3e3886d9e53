"""A session as ``ls`` and ``show`` present it: its status in one word, what a running one is
doing now (read from its newest events), why the daemon leaves a blocked one, its budgets and
what is left of them, and the error behind a failed one.

All of it is folded from the log: the session's summary, its latest checkpoint, its newest
few events and its spec note; nothing here is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import anyio
import attrs

from eventlog import (
    AssistantMessage,
    Budgets,
    Checkpoint,
    Event,
    EventKind,
    EventLog,
    SessionKey,
    SessionSummary,
)

from ..spec._spec import file_identity
from ._common import holder_gone, spec_note
from ._decimals import usd

#: The words ``ls`` shows for a session's state (what ``--status`` takes).
STATUSES = (
    "running", "paused", "due", "deferred", "blocked", "interrupted", "stopped", "budget",
    "aborted", "failed", "completed",
)  # fmt: skip
_FAILED = {"retry_policy_aborted", "lease_lost"}
_BUDGET = {"max_turns_exceeded", "max_tokens_exceeded", "max_cost_exceeded", "wallclock_exceeded"}
#: The event kinds that tell what a running session does now.
_STEP_KINDS = (
    EventKind.USER_MESSAGE,
    EventKind.ASSISTANT_MESSAGE,
    EventKind.TOOL_RESULT,
    EventKind.CHECKPOINT,
    EventKind.HISTORY_SUMMARY,
)
#: How many of a running session's newest events are read to tell what it does.
_STEPS_READ = 8


def held(summary: SessionSummary) -> bool:
    """Whether a live process holds the session (a lease whose holder is not gone)."""
    return bool(summary.holder) and not holder_gone(summary.holder or "")


def status_of(summary: SessionSummary, now: datetime, *, blocked: bool = False) -> str:
    """A session's state in one word, from its latest checkpoint and its lease; ``blocked``
    when its spec keeps the daemon from running it (see :func:`blocked_by`)."""
    reason = summary.stop_reason
    if held(summary):
        return "paused" if summary.paused else "running"
    if summary.stopped:
        return "stopped"
    if summary.paused:
        return "paused"  # a pause request waits for the next resume (or an unpause)
    if blocked and waits_for_daemon(summary):
        return "blocked"
    if reason is None or reason == "context_cancelled":
        return "interrupted"  # a crash, or a signal: resumable as it is
    if reason == "deferred":
        wake = summary.next_wake_at
        return "due" if wake is not None and wake <= now else "deferred"
    if reason == "completed":
        return "completed"
    if reason in _BUDGET:
        return "budget"  # a budget ran out: resume with a larger one
    return "failed" if reason in _FAILED else "aborted"


#: What each stop reason says at the end of a run (the reason itself follows in parentheses).
_ENDED: dict[str, str] = {
    "deferred": "deferred itself until its next wake",
    "max_turns_exceeded": "out of turns",
    "max_tokens_exceeded": "out of tokens",
    "max_cost_exceeded": "out of money",
    "wallclock_exceeded": "out of time for this run",
    "retry_policy_aborted": "its turns kept failing",
    "aborted": "its supervisor aborted it, or a pause outlived pause_max",
    "lease_lost": "another process took the session over",
}


def ended_text(reason: str, *, interrupted: bool) -> str:
    """How a run ended, in words, with its stop reason: ``out of turns (max_turns_exceeded)``."""
    if reason == "completed":
        return "completed"
    if reason == "context_cancelled":
        said = "interrupted" if interrupted else "stopped on purpose"
    else:
        said = _ENDED.get(reason, "ended")
    return f"{said} ({reason})"


def waits_for_daemon(summary: SessionSummary) -> bool:
    """Whether a daemon would run the session some time (deferred, or crashed mid-run), were
    it not stopped, paused or held."""
    return summary.stop_reason in (None, "deferred")


@attrs.frozen
class Blocked:
    """Why a daemon refuses to run a session (``spec_missing``, ``spec_changed``), the spec
    file in question, and the command that mends it."""

    why: str
    spec: str
    fix: str

    @property
    def text(self) -> str:
        """In words, with the fix: ``spec changed: autonomous adopt --spec PATH KEY``."""
        said = "spec missing" if self.why == "spec_missing" else "spec changed"
        return f"{said}: {self.fix}"

    def as_dict(self) -> dict[str, str]:
        """The ``ls --json`` / ``show --json`` form."""
        return {"why": self.why, "spec": self.spec, "fix": self.fix}


async def blocked_by(
    log: EventLog, key: SessionKey, identities: dict[str, str | None] | None = None
) -> Blocked | None:
    """Why a daemon would refuse to run the session, or None: the spec file its spec note
    names is missing, or is not the version the note recorded (it was edited since), as
    :func:`~._common.spec_of_session` finds for the daemon. ``identities`` caches each
    file's identity (None: missing) across calls.
    """
    note = await spec_note(log, key)
    if note is None:
        return None  # started from Python: what runs it is not ours to judge
    path = note["spec"]
    known = {} if identities is None else identities
    if path not in known:
        known[path] = await _identity_of(path)
    current, recorded = known[path], note.get("digest")
    if current is None:
        return Blocked("spec_missing", path, f"autonomous adopt --spec NEW_PATH {key}")
    if isinstance(recorded, str) and recorded != current:
        return Blocked("spec_changed", path, f"autonomous adopt --spec {path} {key}")
    return None


async def _identity_of(path: str) -> str | None:
    """The identity of the spec file at ``path`` now, or None when it cannot be read."""
    try:
        return await anyio.to_thread.run_sync(file_identity, path)
    except OSError:
        return None


#: What :func:`checkpoint_of` finds on a summary that carries no checkpoint field.
_UNREAD = object()


async def checkpoint_of(log: EventLog, summary: SessionSummary) -> Checkpoint | None:
    """The session's latest checkpoint: the one its summary carries when the store fills it
    in (``SessionSummary.checkpoint``), else read (an indexed read)."""
    carried = getattr(summary, "checkpoint", _UNREAD)
    if carried is not _UNREAD:
        return carried if isinstance(carried, Checkpoint) else None
    if summary.checkpoint_seq <= 0:
        return None
    event = await log.latest_checkpoint(summary.key)
    return event.payload if event is not None and isinstance(event.payload, Checkpoint) else None


@attrs.frozen
class Activity:
    """What a running session is doing, as its newest events tell: ``kind`` (a stable word:
    ``starting``, ``calling_model``, ``running_tool``, ``sleeping``, ``waiting``,
    ``retrying``, ``paused``), ``text`` (for people), since when (None: not known) and, for a
    sleep or a wait, until when."""

    kind: str
    text: str
    since: datetime | None = None
    until: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``ls --json`` / ``show --json`` form."""
        return {
            "kind": self.kind,
            "text": self.text,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        }


async def activity_of(log: EventLog, summary: SessionSummary) -> Activity:
    """What a held session is doing now, from its newest events (:func:`activity_from`)."""
    events = await log.read_last(summary.key, _STEP_KINDS, _STEPS_READ)
    return activity_from(events, paused=summary.paused)


def activity_from(events: Sequence[Event], *, paused: bool = False) -> Activity:
    """What a running session does now, from its newest events (oldest first).

    A run appends a model call's answer once the call returns, and its tool results with the
    next answer: the newest event says which step the run is at, not which part of it. After
    a checkpoint the run calls the model for its next turn (or sleeps, or is parked); after an
    answer with tool calls it runs those tools (then calls the model with their results);
    after any other message it calls the model. The checkpoint of an earlier run (one with a
    stop reason) says only that a run is starting: a deferred one may wait for its wake.
    """
    model = next(
        (e.payload.model for e in reversed(events) if isinstance(e.payload, AssistantMessage)),
        "",
    )
    calling = f"calling {model}" if model else "calling the model"
    if not events:
        return Activity("paused", "paused") if paused else Activity("starting", "starting")
    newest = events[-1]
    payload = newest.payload
    if paused:
        return Activity("paused", "paused", newest.at)
    if isinstance(payload, Checkpoint):
        return _after_checkpoint(payload, newest.at, calling)
    if isinstance(payload, AssistantMessage) and payload.tool_calls:
        names = ", ".join(dict.fromkeys(c.name for c in payload.tool_calls))
        return Activity("running_tool", f"running {names}", newest.at)
    return Activity("calling_model", calling, newest.at)  # a prompt, tool results, a summary


def _after_checkpoint(cp: Checkpoint, at: datetime, calling: str) -> Activity:
    """What a run does after writing ``cp`` at ``at`` (or what a new run does after it)."""
    wake = cp.next_wake_at
    if cp.stop_reason is not None:  # an earlier run's end: a run has just taken it
        if cp.stop_reason == "deferred" and wake is not None:
            return Activity("waiting", "waiting", None, wake)
        return Activity("starting", "starting")
    if cp.paused:
        return Activity("paused", "paused", at)
    if cp.turn_failed:
        why = f" after {cp.error}" if cp.error else ""
        return Activity("retrying", f"retrying turn {cp.turns + 1}{why}", at)
    if wake is not None:
        return Activity("sleeping", "sleeping", at, wake)
    return Activity("calling_model", calling, at)


def budgets_dict(budgets: Budgets | None) -> dict[str, Any] | None:
    """A session's budgets as ``ls --json`` gives them (0: no cap), or None when not recorded."""
    if budgets is None:
        return None
    return {
        "max_turns": budgets.max_turns,
        "max_input_tokens": budgets.max_input_tokens,
        "max_output_tokens": budgets.max_output_tokens,
        "max_cost_usd": usd(budgets.max_cost_usd),
        "max_wallclock": budgets.max_wallclock,
    }


def budgets_left(budgets: Budgets | None, cp: Checkpoint | None) -> dict[str, Any] | None:
    """What is left of each budget after ``cp``'s totals (None for one with no cap; never
    below 0); the wall-clock is per run, so only its cap is said (in the budgets). None when
    the budgets are not recorded."""
    if budgets is None:
        return None
    turns = cp.turns if cp else 0
    input_tokens = cp.input_tokens if cp else 0
    output_tokens = cp.output_tokens if cp else 0
    cost = cp.cost_usd if cp else 0.0
    b = budgets
    return {
        "turns": max(b.max_turns - turns, 0) if b.max_turns else None,
        "input_tokens": max(b.max_input_tokens - input_tokens, 0) if b.max_input_tokens else None,
        "output_tokens": (
            max(b.max_output_tokens - output_tokens, 0) if b.max_output_tokens else None
        ),
        "cost_usd": usd(max(b.max_cost_usd - cost, 0.0)) if b.max_cost_usd else None,
    }


def error_of(cp: Checkpoint | None) -> str | None:
    """The error behind the session's latest failed turn or run (None: none recorded)."""
    return cp.error if cp is not None and cp.error else None


@attrs.frozen
class SessionView:
    """One session as an operator looks at it (see the module docstring)."""

    summary: SessionSummary
    checkpoint: Checkpoint | None
    status: str
    activity: Activity | None = None
    blocked: Blocked | None = None

    @property
    def ending(self) -> Checkpoint | None:
        """The checkpoint when it says how the session stands; None when it is the end of an
        earlier run and a new run holds the session (its stop reason, outcome and error are
        not the session's now)."""
        cp = self.checkpoint
        if cp is not None and self.activity is not None and cp.stop_reason is not None:
            return None
        return cp


async def view_of(
    log: EventLog,
    summary: SessionSummary,
    now: datetime,
    identities: dict[str, str | None] | None = None,
) -> SessionView:
    """Fold what the log says of one session into a :class:`SessionView`: its checkpoint; for
    a held one what it does now; for one a daemon would run whether its spec lets it."""
    cp = await checkpoint_of(log, summary)
    activity = blocked = None
    if held(summary):
        activity = await activity_of(log, summary)
    elif not (summary.stopped or summary.paused) and waits_for_daemon(summary):
        blocked = await blocked_by(log, summary.key, identities)
    status = status_of(summary, now, blocked=blocked is not None)
    return SessionView(summary, cp, status, activity, blocked)


async def views_of(
    log: EventLog, summaries: Sequence[SessionSummary], now: datetime
) -> list[SessionView]:
    """:func:`view_of` for each session, each spec file hashed once."""
    identities: dict[str, str | None] = {}
    return [await view_of(log, s, now, identities) for s in summaries]

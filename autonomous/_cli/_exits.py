"""The ``autonomous`` command's exit statuses, one per way a command or a run can end."""

from __future__ import annotations

import enum

from .._result import StopReason


class Exit(enum.IntEnum):
    """What the command's exit status says; scripts, systemd and cron can branch on it.

    0 is the only success a run has (it completed). A deferred run is not an error, but it is
    not done either: a script that loops on ``resume`` stops at 0. 2 is kept for usage errors
    (a bad flag, a bad spec, a misuse the library refuses before it writes anything).
    """

    OK = 0  #: the command did what it was asked; a run completed
    ERROR = 1  #: the command could not do it (a spec with errors, a finished session, no session)
    USAGE = 2  #: a usage or configuration error: bad flags, a bad spec, refused options
    LOCKED = 3  #: the session is held by another live process
    STORE = 4  #: the event log could not be opened, read or written
    DEFERRED = 10  #: the run deferred itself (schedule_next_turn); resume it later
    BUDGET = 11  #: a budget stopped the run (turns, tokens, cost, wall-clock)
    ABORTED = 12  #: a supervisor aborted the run, or a pause outlived pause_max
    FAILED = 13  #: turns kept failing and the retry policy gave up (retry_policy_aborted)
    LEASE_LOST = 14  #: another process took the session over; this run wrote nothing more
    STOPPED = 15  #: the session was stopped (``autonomous stop``, a handle); resume with --force
    SIGINT = 130  #: interrupted by SIGINT, after the final checkpoint was written
    SIGTERM = 143  #: interrupted by SIGTERM, after the final checkpoint was written


_BY_REASON = {
    StopReason.COMPLETED: Exit.OK,
    StopReason.DEFERRED: Exit.DEFERRED,
    StopReason.MAX_TURNS_EXCEEDED: Exit.BUDGET,
    StopReason.MAX_TOKENS_EXCEEDED: Exit.BUDGET,
    StopReason.MAX_COST_EXCEEDED: Exit.BUDGET,
    StopReason.WALLCLOCK_EXCEEDED: Exit.BUDGET,
    StopReason.ABORTED: Exit.ABORTED,
    StopReason.RETRY_POLICY_ABORTED: Exit.FAILED,
    StopReason.LEASE_LOST: Exit.LEASE_LOST,
    StopReason.CONTEXT_CANCELLED: Exit.STOPPED,
}


def for_reason(reason: str | StopReason) -> Exit:
    """The exit status of a run that stopped for ``reason``."""
    return _BY_REASON[StopReason(reason)]


def for_signal(signum: int) -> int:
    """The conventional status after ``signum``: 128 + its number (130 SIGINT, 143 SIGTERM)."""
    return 128 + signum


def help_text() -> str:
    """The exit statuses as ``--help`` shows them, one per line."""
    lines = ["exit status:"]
    for code in Exit:
        doc = _DOCS[code]
        lines.append(f"  {code.value:>3}  {doc}")
    return "\n".join(lines)


_DOCS = {
    Exit.OK: "done: the command succeeded; a run completed",
    Exit.ERROR: "the command could not do it (spec errors, a finished or unknown session)",
    Exit.USAGE: "usage or configuration error (bad flags, a bad spec, refused options)",
    Exit.LOCKED: "the session is held by another live process",
    Exit.STORE: "the event log could not be opened, read or written",
    Exit.DEFERRED: "the run deferred itself: resume it later (not an error)",
    Exit.BUDGET: "a budget stopped the run (turns, tokens, cost, wall-clock)",
    Exit.ABORTED: "the run was aborted (supervisor, or a pause past pause_max)",
    Exit.FAILED: "turns kept failing; the retry policy gave up",
    Exit.LEASE_LOST: "another process took the session over",
    Exit.STOPPED: "the session was stopped; `resume --force` runs it again",
    Exit.SIGINT: "interrupted by SIGINT (Ctrl-C), final checkpoint written",
    Exit.SIGTERM: "interrupted by SIGTERM, final checkpoint written",
}

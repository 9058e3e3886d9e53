"""``autonomous ls``: the sessions of the log, newest first, with their status and next wake,
filtered by status, app and age."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from eventlog import SessionSummary, utcnow

from ._common import emit_json, holder_gone, open_log, usd
from ._exits import Exit
from ._times import cutoff, show_wake, since_arg

#: The words ``ls`` shows for a session's state (what ``--status`` takes).
STATUSES = (
    "running", "paused", "due", "deferred", "interrupted", "stopped", "budget", "aborted",
    "failed", "completed",
)  # fmt: skip
_FAILED = {"retry_policy_aborted", "lease_lost"}
_BUDGET = {"max_turns_exceeded", "max_tokens_exceeded", "max_cost_exceeded", "wallclock_exceeded"}


def status_of(summary: SessionSummary, now: datetime) -> str:
    """A session's state in one word, from its latest checkpoint and its lease."""
    reason = summary.stop_reason
    if summary.holder and not holder_gone(summary.holder):
        return "paused" if summary.paused else "running"
    if summary.stopped:
        return "stopped"
    if summary.paused:
        return "paused"  # a pause request waits for the next resume (or an unpause)
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


def statuses_arg(text: str) -> list[str]:
    """An argparse ``type=`` for ``--status``: one status or a comma list, each one ls shows."""
    words = [word.strip() for word in text.split(",") if word.strip()]
    unknown = [word for word in words if word not in STATUSES]
    if unknown or not words:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a status is one of {', '.join(STATUSES)} (or a comma list of them)"
        )
    return words


def add_ls_options(parser: argparse.ArgumentParser) -> None:
    """The filters of ``ls``."""
    parser.add_argument(
        "--status",
        type=statuses_arg,
        action="extend",
        metavar="STATUS",
        help=f"only sessions in these states (repeat, or a comma list): {', '.join(STATUSES)}",
    )
    parser.add_argument("--app", help="only the sessions of this app")
    parser.add_argument(
        "--since",
        type=since_arg,
        metavar="WHEN",
        help="only sessions updated since WHEN: a duration back (30m, 1h, 2d) or an ISO date",
    )


def summary_dict(summary: SessionSummary, now: datetime) -> dict[str, Any]:
    """One ``ls --json`` row."""
    wake = summary.next_wake_at
    return {
        "session": str(summary.key),
        "app": summary.key.app,
        "user": summary.key.user,
        "session_id": summary.key.session_id,
        "status": status_of(summary, now),
        "stop_reason": summary.stop_reason,
        "turns": summary.turns,
        "cost_usd": usd(summary.cost_usd),
        "priced": not summary.unpriced,
        "input_tokens": summary.input_tokens,
        "cached_input_tokens": summary.cached_input_tokens,
        "next_wake_at": wake.isoformat() if wake else None,
        "holder": summary.holder,
        "updated_at": summary.updated_at.isoformat(),
    }


def cost_text(cost_usd: float, *, unpriced: bool) -> str:
    """A cost as ls and show print it: ``unpriced`` when no price was known (not $0)."""
    return "unpriced" if unpriced else f"${cost_usd:.6f}"


def tokens_text(input_tokens: int, cached_input_tokens: int) -> str:
    """Input tokens as ls prints them, with the share read from the prompt cache when any
    was: ``12,400 (96% cached)``."""
    shown = f"{input_tokens:,}"
    if cached_input_tokens <= 0 or input_tokens <= 0:
        return shown
    # Rounded down, so that 100% means all of it; "<1%" rather than a cache read shown as 0%.
    percent = cached_input_tokens * 100 // input_tokens
    share = f"{percent}%" if percent else "<1%"
    return f"{shown} ({share} cached)"


def _kept(args: argparse.Namespace, summary: SessionSummary, now: datetime) -> bool:
    """Whether ``summary`` passes the ``--status``, ``--app`` and ``--since`` filters."""
    if args.status and status_of(summary, now) not in args.status:
        return False
    if args.app is not None and summary.key.app != args.app:
        return False
    return args.since is None or summary.updated_at >= cutoff(args.since, now)


async def cmd_ls(args: argparse.Namespace) -> int:
    """List the sessions of the log, newest first."""
    now = utcnow()
    async with open_log(args) as log:
        summaries = [s for s in await log.sessions() if _kept(args, s, now)]
    if args.json:
        emit_json([summary_dict(s, now) for s in summaries])
        return Exit.OK
    if not summaries:
        print("no sessions")
        return Exit.OK
    header = ("SESSION", "STATUS", "STOP REASON", "TURNS", "TOKENS", "COST", "NEXT WAKE", "HOLDER")
    table = [header] + [
        (
            str(s.key),
            status_of(s, now),
            s.stop_reason or "-",
            str(s.turns),
            tokens_text(s.input_tokens, s.cached_input_tokens),
            cost_text(s.cost_usd, unpriced=s.unpriced),
            show_wake(s.next_wake_at, now, utc=args.utc) if s.next_wake_at else "-",
            s.holder or "-",
        )
        for s in summaries
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return Exit.OK

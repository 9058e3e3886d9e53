"""``autonomous ls``: the sessions of the log, newest first, with their status, what a running
one is doing, why a blocked one waits, and their totals; filtered by status, app and age."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from eventlog import utcnow

from ._common import emit_json, open_log
from ._decimals import usd
from ._exits import Exit
from ._times import cutoff, show_span, show_wake, since_arg
from ._view import (
    STATUSES,
    Activity,
    SessionView,
    budgets_dict,
    budgets_left,
    error_of,
    status_of,
    views_of,
)

__all__ = ["STATUSES", "add_ls_options", "cmd_ls", "status_of", "summary_dict"]


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


def summary_dict(view: SessionView) -> dict[str, Any]:
    """One ``ls --json`` row: the session, its status (what a running one does now, why a
    blocked one waits), its totals, budgets and what is left of them, and how its last run
    ended (stop reason, outcome, detail, error: none while a new run holds it)."""
    summary, cp, ending = view.summary, view.checkpoint, view.ending
    budgets = cp.budgets if cp is not None else None
    wake = summary.next_wake_at
    return {
        "session": str(summary.key),
        "app": summary.key.app,
        "user": summary.key.user,
        "session_id": summary.key.session_id,
        "status": view.status,
        "activity": view.activity.as_dict() if view.activity else None,
        "blocked": view.blocked.as_dict() if view.blocked else None,
        "stop_reason": ending.stop_reason if ending is not None else None,
        "turns": summary.turns,
        "input_tokens": summary.input_tokens,
        "cached_input_tokens": summary.cached_input_tokens,
        "output_tokens": cp.output_tokens if cp is not None else 0,
        "cost_usd": usd(summary.cost_usd),
        "priced": not summary.unpriced,
        "budgets": budgets_dict(budgets),
        "budgets_left": budgets_left(budgets, cp),
        "outcome": ending.outcome if ending is not None else None,
        "result": ending.result if ending is not None else None,
        "done_detail": ending.done_detail if ending is not None else "",
        "final_text": ending.final_text if ending is not None else "",
        "error": error_of(ending),
        "next_wake_at": wake.isoformat() if wake else None,
        "holder": summary.holder,
        "updated_at": summary.updated_at.isoformat(),
    }


def cost_text(cost_usd: float, *, unpriced: bool) -> str:
    """A cost as ls and show print it: ``unpriced`` when no price was known (not $0)."""
    return "unpriced" if unpriced else f"${cost_usd:.6f}"


def tokens_text(input_tokens: int, cached_input_tokens: int, output_tokens: int) -> str:
    """Tokens as ls prints them, input with the share read from the prompt cache when any
    was, then output: ``12,400 in (96% cached) / 310 out``."""
    shown = f"{input_tokens:,} in"
    if cached_input_tokens > 0 and input_tokens > 0:
        # Rounded down, so that 100% means all of it; "<1%" rather than a cache read shown as 0%.
        percent = cached_input_tokens * 100 // input_tokens
        shown += f" ({percent}% cached)" if percent else " (<1% cached)"
    return f"{shown} / {output_tokens:,} out"


def activity_text(activity: Activity, now: datetime, *, utc: bool) -> str:
    """What a running session does, for how long, and when it wakes: ``running check_disk
    for 12s``, ``sleeping for 5s, wakes in 4m 00s (2026-12-01 16:05:00 +00:00)``."""
    text = activity.text
    if activity.since is not None:
        text += f" for {show_span((now - activity.since).total_seconds())}"
    if activity.until is not None:
        text += f", wakes {show_wake(activity.until, now, utc=utc)}"
    return text


def detail_text(view: SessionView, now: datetime, *, utc: bool) -> str:
    """The DETAIL cell: what a running session does now, why a blocked one waits, else how
    its last run ended (its stop reason); never an earlier run's stop reason beside a run."""
    if view.activity is not None:
        return activity_text(view.activity, now, utc=utc)
    if view.blocked is not None:
        return view.blocked.text
    ending = view.ending
    return (ending.stop_reason if ending is not None else None) or "-"


def _kept(args: argparse.Namespace, view: SessionView, now: datetime) -> bool:
    """Whether ``view`` passes the ``--status``, ``--app`` and ``--since`` filters."""
    summary = view.summary
    if args.status and view.status not in args.status:
        return False
    if args.app is not None and summary.key.app != args.app:
        return False
    return args.since is None or summary.updated_at >= cutoff(args.since, now)


async def cmd_ls(args: argparse.Namespace) -> int:
    """List the sessions of the log, newest first."""
    now = utcnow()
    async with open_log(args) as log:
        summaries = await log.sessions()
        if args.app is not None:  # before the views: each may read the log
            summaries = [s for s in summaries if s.key.app == args.app]
        views = [v for v in await views_of(log, summaries, now) if _kept(args, v, now)]
    if args.json:
        emit_json([summary_dict(v) for v in views])
        return Exit.OK
    if not views:
        print("no sessions")
        return Exit.OK
    header = ("SESSION", "STATUS", "DETAIL", "TURNS", "TOKENS", "COST", "NEXT WAKE", "HOLDER")
    table = [header] + [
        (
            str(v.summary.key),
            v.status,
            detail_text(v, now, utc=args.utc),
            str(v.summary.turns),
            tokens_text(
                v.summary.input_tokens,
                v.summary.cached_input_tokens,
                v.checkpoint.output_tokens if v.checkpoint is not None else 0,
            ),
            cost_text(v.summary.cost_usd, unpriced=v.summary.unpriced),
            show_wake(v.summary.next_wake_at, now, utc=args.utc) if v.summary.next_wake_at else "-",
            v.summary.holder or "-",
        )
        for v in views
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return Exit.OK

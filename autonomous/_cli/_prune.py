"""``autonomous prune``: drop the old events of finished sessions, keeping their summaries."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

from eventlog import PruneResult, utcnow

from ..spec._durations import parse_duration
from ._common import emit_json, open_log
from ._exits import Exit

#: What ``prune --help`` says about what goes and what stays.
_DESCRIPTION = (
    "drop the events of sessions that finished before a cut-off (completed, out of budget,"
    " aborted, or stopped on purpose), keeping each one's final checkpoint and notes: ls, show"
    " and resume still know them. Deferred and running sessions are never touched, interrupted"
    " ones only with --interrupted."
    " The file does not shrink (SQLite reuses the space; VACUUM, offline, gives it back)."
)


def cutoff_arg(text: str) -> float | datetime:
    """An argparse ``type=`` for ``--before``: a duration ago (``30d``, seconds) or an ISO date
    or time (local unless it names its zone, as ``ls --since``), never in the future."""
    try:
        return parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30d, 12h, seconds) nor an ISO date (2026-01-31)"
        ) from None
    # a date without a zone is local time, as ls --since reads it
    moment = moment if moment.tzinfo is not None else moment.astimezone()
    if moment > utcnow():
        raise argparse.ArgumentTypeError(f"{text!r} is in the future: give a past date")
    return moment.astimezone(UTC)


def add_prune(sub: argparse.ArgumentParser) -> None:
    """The description and options of ``prune``."""
    sub.description = _DESCRIPTION
    sub.add_argument(
        "--before",
        required=True,
        type=cutoff_arg,
        metavar="AGE|DATE",
        help="prune sessions finished longer ago than this (30d, 12h) or before this ISO date",
    )
    sub.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    sub.add_argument(
        "--interrupted",
        action="store_true",
        help="also prune interrupted sessions: a run that crashed, or that a signal or its"
        " caller cancelled, and that nobody resumed since the cut-off (ls: interrupted); a"
        " session a live process holds is still left alone",
    )


async def cmd_prune(args: argparse.Namespace) -> int:
    """Prune the log; print what went (or would go, with ``--dry-run``)."""
    before = args.before
    if not isinstance(before, datetime):
        before = utcnow() - timedelta(seconds=before)
    async with open_log(args) as log:
        # passed only when set: a store without interrupted pruning still does the rest
        also = {"interrupted": True} if args.interrupted else {}
        result = await log.prune(before, dry_run=args.dry_run, **also)
    if args.json:
        emit_json(_as_dict(result))
    else:
        _print(result)
    return Exit.OK


def _as_dict(result: PruneResult) -> dict[str, object]:
    """The ``--json`` document of a prune."""
    return {
        "before": result.before,
        "dry_run": result.dry_run,
        "sessions": result.sessions,
        "events": result.events,
        "pruned": [
            {
                "session": str(p.key),
                "events": p.events,
                "stop_reason": p.stop_reason,
                "updated_at": p.updated_at,
            }
            for p in result.pruned
        ],
        "held": [str(key) for key in result.held],
    }


def _print(result: PruneResult) -> None:
    """One line per session, then the counts."""
    verb = "would prune" if result.dry_run else "pruned"
    for p in result.pruned:
        finished = p.updated_at.isoformat(timespec="seconds")
        if p.stop_reason:
            how = f"{p.stop_reason}, finished {finished}"
        else:  # a crashed run wrote no stop reason
            how = f"interrupted, last written {finished}"
        print(f"{verb} {p.key}: {p.events} events ({how})")
    for key in result.held:
        print(f"left {key} alone: a live process holds it")
    sessions = "session" if result.sessions == 1 else "sessions"
    cut = result.before.isoformat(timespec="seconds")
    print(f"{verb} {result.sessions} {sessions}, {result.events} events, finished before {cut}")

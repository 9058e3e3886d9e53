"""``autonomous daemon``: its options and its entry point; the orchestrator itself is
:class:`._daemon.Daemon` (the library's :mod:`autonomous.fleet`, resuming from specs)."""

from __future__ import annotations

import argparse
import sys

from ..fleet._claims import DEFAULT_LEASE_TTL, DEFAULT_MAX_CONCURRENT
from ..spec._hooks import hook_timeout
from ._common import CliError, open_log
from ._daemon import Daemon
from ._durations import duration_arg
from ._exits import for_signal
from ._jsonlines import json_lines_logging, reporter
from ._signals import until_signal


def add_daemon_options(parser: argparse.ArgumentParser) -> None:
    """The ``daemon`` command's options."""
    parser.add_argument(
        "--poll",
        type=duration_arg,
        default=5.0,
        help="time between polls: seconds or a duration like 30s, 1m (default 5)",
    )
    parser.add_argument(
        "--once", action="store_true", help="one pass: resume what is due, then exit"
    )
    parser.add_argument(
        "--deferred-only",
        action="store_true",
        help="do not resume interrupted (crashed) sessions, only deferred ones",
    )
    parser.add_argument(
        "--lease-ttl",
        type=duration_arg,
        default=DEFAULT_LEASE_TTL,
        metavar="DURATION",
        help="how long a claimed session's lease lasts unrenewed (renewed every third of it):"
        " a daemon that dies loses its sessions to the others this long after"
        f" (default {DEFAULT_LEASE_TTL:g}s)",
    )
    parser.add_argument(
        "--max-concurrent",
        type=_slots,
        default=DEFAULT_MAX_CONCURRENT,
        metavar="N",
        help=f"run at most N sessions at once; the others wait (default {DEFAULT_MAX_CONCURRENT})",
    )


def _slots(text: str) -> int:
    """An argparse ``type=`` for ``--max-concurrent``: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


async def cmd_daemon(args: argparse.Namespace) -> int:
    """Run the orchestrator until SIGINT/SIGTERM (or one pass with ``--once``)."""
    for name in ("poll", "lease_ttl"):
        if not getattr(args, name) > 0:
            print(f"error: --{name.replace('_', '-')} must be > 0 seconds", file=sys.stderr)
            return 2
    try:  # read again for each hook: refused here, at once, rather than at each run's end
        hook_timeout()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.json:  # one stream of JSON lines on stdout: the reports and every log
        json_lines_logging(args.verbose)
    report = reporter(args.json, utc=args.utc)
    async with open_log(args, create=True) as log:
        daemon = Daemon(
            log,
            poll=args.poll,
            once=args.once,
            crashed=not args.deferred_only,
            report=report,
            max_concurrent=args.max_concurrent,
            lease_ttl=args.lease_ttl,
        )
        _, signum = await until_signal(daemon.serve)
    report("daemon_stopped", signal=signum)
    return for_signal(signum) if signum is not None else 0

"""The ``autonomous`` command: validate, run and resume agent specs; list, show and control
sessions in an event log (``adopt`` records their spec); ``daemon``, which resumes sessions when
they are due; ``prune``; and ``token``, the HTTP API's tokens.

Map:
    _main.py       the parser, logging set-up and dispatch
    _exits.py      the exit statuses
    _durations.py  durations as command-line arguments (--every 30m)
    _common.py     the log, session names, the spec note, JSON output
    _decimals.py   numbers as shown: costs without float noise, floats positional
    _signals.py    SIGINT and SIGTERM: the first stops the work cleanly, later ones wait for that;
                   the process's exit, which no abandoned thread holds up
    _otel.py       OpenTelemetry for run, resume and daemon, from the OTEL_* variables
    _output.py     standard output and error that survive a reader going away (ls | head)
    _run.py        run and resume (--spec adopts a spec)
    _budgets.py    the budgets a resume runs under: the session's own
    _adopt.py      adopt: record a spec for sessions without running them
    _status.py     their progress: a live status line on a terminal, plain lines otherwise
    _times.py      times with their date and zone, spans, wakes relative to now
    _view.py       a session as ls and show present it: status, activity, blocked, budgets
    _ls.py         ls (with its filters)
    _show.py       show (the timeline, and --follow)
    _inspect.py    inject, pause, unpause, stop, wake
    _daemon.py     the daemon's resumes from recorded specs (the rest: autonomous.fleet)
    _daemon_command.py  the daemon command: its options and entry point
    _jsonlines.py  the daemon's report lines; --json: one JSON-lines stream for log shippers
    _hooks.py      running the spec's on_exit completion hook
    _prune.py      prune (retention: the old events of finished sessions)
    _tokens.py     token create, ls, revoke: the HTTP API's tokens (a secret shown once)
    _serve.py      serve: the HTTP control API over the log (open only on loopback, loudly)
The spec files themselves (reading, validate, the daemon's cache) live in autonomous/spec/.

Exit status: see :class:`._exits.Exit` (0 completed, 10 deferred, 11 budget, 12 aborted,
13 failed, 14 lease lost, 15 stopped, 1 the command could not do it, 2 usage, 3 locked, 4 the
store; 130/143 after SIGINT/SIGTERM once the final checkpoint is written).
"""

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``autonomous`` command (see :func:`._main.main`).

    The command's modules (parser, daemon, ls, show ...) are imported when it runs, not when
    ``autonomous`` is: the library imports nothing else of this package.
    """
    from ._main import main as command

    return command(argv)

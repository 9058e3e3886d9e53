"""The ``autonomous`` command's parser, logging set-up and dispatch (the exit codes are in
:mod:`autonomous._cli`'s docstring)."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata

import anyio
import structlog

from eventlog import EventLogError, LeaseLost, SessionFinished, SessionLocked

from .._errors import AutonomousError
from ..spec._validate import validate
from ._adopt import add_adopt_options, cmd_adopt
from ._common import CliError, emit_json, single
from ._daemon_command import add_daemon_options, cmd_daemon
from ._exits import Exit, for_signal, help_text
from ._inspect import cmd_control, cmd_inject
from ._ls import add_ls_options, cmd_ls
from ._otel import configure_from_environment
from ._output import pipe_safe_output
from ._prune import add_prune, cmd_prune
from ._run import add_budget_overrides, cmd_resume, cmd_run
from ._serve import add_serve_options, cmd_serve
from ._show import add_show_options, cmd_show
from ._signals import Shutdown, handling_signals
from ._tokens import add_token_commands, cmd_token

Command = Callable[[argparse.Namespace], Awaitable[int]]

#: The environment variable that names the event log when ``--db`` does not.
DB_ENV = "AUTONOMOUS_DB"
DEFAULT_DB = "autonomous.db"
#: The distribution this command comes with (its version is ``--version``'s).
DISTRIBUTION = "bounded-autonomous"


def _common() -> argparse.ArgumentParser:
    """Options every command takes, before or after its name."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="PATH_OR_URL",
        help="the event log: a SQLite file, or a postgresql:// (postgres://) URL for a log"
        f" shared by many hosts (default: ${DB_ENV}, else ./{DEFAULT_DB})",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    common.add_argument(
        "--utc",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show times in UTC (default: this machine's zone)",
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="show structured logs on stderr (-vv for debug)",
    )
    return common


def _version() -> str:
    """The installed distribution's version ("unknown" when run from a bare source tree)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``autonomous`` command."""
    common = _common()
    parser = argparse.ArgumentParser(
        prog="autonomous",
        description="Run bounded autonomous agents from spec files and control their sessions.",
        epilog=help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"autonomous {_version()}",
        help="print the installed version (bounded-autonomous) and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, text: str) -> argparse.ArgumentParser:
        """A sub-command with the common options."""
        return sub.add_parser(name, help=text, description=text, parents=[common])

    p = add("validate", "check an agent spec statically (errors and warnings)")
    p.add_argument("spec", help="the agent spec (TOML)")

    _add_run_commands(add)

    add_ls_options(
        add(
            "ls",
            "list sessions: status, what each does now or why it stopped, turns, tokens,"
            " cost, next wake, holder",
        )
    )

    add_show_options(add("show", "print the timeline of a session's events"))

    _add_control_commands(add)

    add_prune(add("prune", "drop the old events of finished sessions, keeping their summaries"))

    p = add("daemon", "resume sessions when they are due, until interrupted")
    add_daemon_options(p)

    add_serve_options(add("serve", "serve the HTTP control API over the log, until interrupted"))

    add_token_commands(
        add("token", "create, list and revoke the HTTP API's tokens (kept in the event log)"),
        common,
    )
    return parser


def _add_run_commands(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """run, resume and adopt: the commands that start a session, go on with one, or say which
    spec it runs."""
    p = add("run", "start a new session from an agent spec and run it here")
    p.add_argument("spec", help="the agent spec (TOML)")
    p.add_argument("--goal", help="the goal (default: the spec's goal)")
    p.add_argument("--session", help="the session id (default: NAME-<random>)")
    p.add_argument("--model", help="a litellm model string, instead of the spec's model")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    add_budget_overrides(p)

    p = add("resume", "continue a deferred, interrupted or crashed session here")
    p.add_argument("session", help="app/user/session_id, or a session id unique in the log")
    p.add_argument(
        "--force", action="store_true", help="run a session that was stopped on purpose again"
    )
    p.add_argument(
        "--spec",
        metavar="PATH",
        help="adopt this agent spec for the session (a moved spec, a session started from"
        " Python); it is recorded, so later resumes and the daemon use it",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    add_budget_overrides(p)

    add_adopt_options(
        add(
            "adopt",
            "record a spec file (edited, or moved) as the spec of sessions, without running"
            " them; the daemon then runs them when due",
        )
    )


def _add_control_commands(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """inject, pause, unpause, stop and wake: the commands that control a session from here."""
    p = add("inject", "queue an inbox message for a session (running or not)")
    p.add_argument("session", help="app/user/session_id, or a session id unique in the log")
    p.add_argument("text", help="the message")
    _caller_options(p)
    p.add_argument("--admin", action="store_true", help="the sender is an admin")
    p.add_argument("--label", action="append", metavar="K=V", help="a label of the sender")
    p.add_argument(
        "--wake",
        action="store_true",
        help="also wake the session (as `autonomous wake`): a deferred one does not wait for"
        " its wake time",
    )

    for name, text in (
        ("pause", "ask a session to pause at its next turn boundary"),
        ("unpause", "let a paused session go on"),
        (
            "stop",
            "stop a session: a running one ends at its next step (context_cancelled); the stop"
            " sticks: the daemon leaves the session and `resume` refuses it, until"
            " `autonomous resume SESSION --force`",
        ),
        (
            "wake",
            "end a session's wait for its wake time: a sleeping run goes on at once, a"
            " deferred session's next resume does not wait",
        ),
    ):
        p = add(name, text)
        p.add_argument("session", help="app/user/session_id, or a session id unique in the log")
        _caller_options(p)


def _caller_options(parser: argparse.ArgumentParser) -> None:
    """The ``--as`` option of the commands that record who sent them."""
    parser.add_argument(
        "--as", dest="as_identity", metavar="IDENTITY", help="who sends it (default: you)"
    )


def configure_logging(verbose: int, as_json: bool) -> None:
    """structlog (and stdlib logging) on standard error; the CLI is the only place that does."""
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    renderer = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr)


async def cmd_validate(args: argparse.Namespace) -> int:
    """Print the spec's problems; exit 1 when there is an error."""
    problems = validate(args.spec)
    errors = [p for p in problems if p.severity == "error"]
    if args.json:
        emit_json(
            {
                "spec": args.spec,
                "ok": not errors,
                "problems": [
                    {"severity": p.severity, "where": p.where, "message": p.message}
                    for p in problems
                ],
            }
        )
    else:
        for problem in problems:
            print(problem)
        warnings = len(problems) - len(errors)
        print(f"{args.spec}: {len(errors)} error(s), {warnings} warning(s)")
    return Exit.ERROR if errors else Exit.OK


COMMANDS: dict[str, Command] = {
    "validate": cmd_validate,
    "run": cmd_run,
    "resume": cmd_resume,
    "adopt": cmd_adopt,
    "ls": cmd_ls,
    "show": cmd_show,
    "inject": cmd_inject,
    "pause": cmd_control,
    "unpause": cmd_control,
    "stop": cmd_control,
    "wake": cmd_control,
    "daemon": cmd_daemon,
    "prune": cmd_prune,
    "token": cmd_token,
    "serve": cmd_serve,
}


#: The commands that run agents: OpenTelemetry is set up for them from the environment.
RUNS_AGENTS = frozenset({"run", "resume", "daemon"})


def _traced(command: Command) -> Command:
    """``command``, after OpenTelemetry's set-up from the ``OTEL_*`` variables (see
    :mod:`._otel`; a bad one is the command's usage error)."""

    async def traced(args: argparse.Namespace) -> int:
        configure_from_environment()
        return await command(args)

    return traced


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: parse, set up logging, run the command; returns the exit status.

    Called with no ``argv`` it is the process's entry point and keeps its signal handlers to
    the end (see :func:`handling_signals`); with ``argv`` (a program or a test calling it) it
    puts the old handlers back.
    """
    with pipe_safe_output(), handling_signals(restore=argv is not None) as shutdown:
        args = build_parser().parse_args(argv)
        args.db = getattr(args, "db", None) or os.environ.get(DB_ENV) or DEFAULT_DB
        args.json = getattr(args, "json", False)
        args.verbose = getattr(args, "verbose", 0)
        args.utc = getattr(args, "utc", False)
        configure_logging(args.verbose, args.json)
        command = COMMANDS[args.command]
        if args.command in RUNS_AGENTS:
            command = _traced(command)
        code = _run_command(shutdown, functools.partial(command, args))
        if code is None:  # the first signal cancelled a command that does no run
            return for_signal(shutdown.signum or signal.SIGINT)
        return code


def _run_command(shutdown: Shutdown, command: Callable[[], Awaitable[int]]) -> int | None:
    """Run the command on a new event loop; its errors as one line and their exit status."""
    try:
        try:
            return anyio.run(shutdown.guard, command, backend="asyncio")
        except BaseExceptionGroup as group:
            raise single(group) from None
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except EventLogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return _store_exit(exc)
    except AutonomousError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return Exit.USAGE


def _store_exit(exc: EventLogError) -> int:
    """The exit status of an event-log error that reached the top."""
    if isinstance(exc, SessionLocked):
        return Exit.LOCKED
    if isinstance(exc, SessionFinished):
        return Exit.ERROR
    if isinstance(exc, LeaseLost):
        return Exit.LEASE_LOST
    return Exit.STORE

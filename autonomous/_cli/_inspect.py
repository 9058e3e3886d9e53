"""``inject``, ``pause``, ``unpause``, ``stop`` and ``wake``: control sessions in the log from this
process (a running session obeys within about a second)."""

from __future__ import annotations

import argparse
import getpass

from permissions import Caller

from .._control._remote import send_control, send_inject
from ._common import (
    CliError,
    cli_errors,
    emit_json,
    open_log,
    require_session,
    resolve_session,
)
from ._exits import Exit

#: The control action each command sends.
CONTROL_ACTIONS = {"pause": "pause", "unpause": "resume", "stop": "stop", "wake": "wake"}
#: What each command says it did (``{key}``: the session).
_DONE = {
    "pause": "paused {key}: it parks before its next turn (a session that is not running, at"
    " its next resume) until `autonomous unpause {key}`",
    "unpause": "unpaused {key}",
    "stop": "stopped {key}: it stays stopped until `autonomous resume {key} --force`",
    "wake": "woke {key}: it goes on without waiting for its wake time (a sleeping run at once,"
    " a deferred session when it is next resumed)",
}


def caller_of(args: argparse.Namespace) -> Caller:
    """The caller a control command records: ``--as`` (default: the OS user), labels, admin."""
    labels: dict[str, str] = {}
    for item in getattr(args, "label", None) or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--label {item!r}: use key=value")
        labels[name] = value
    identity = args.as_identity or _os_user()
    return Caller(identity=identity, labels=labels, admin=bool(getattr(args, "admin", False)))


def _os_user() -> str:
    """The login name of this process's user, or "" when unknown."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return ""


async def cmd_inject(args: argparse.Namespace) -> int:
    """Append an inbox message to a session (durable when this returns)."""
    caller = caller_of(args)
    async with open_log(args) as log:
        key = await resolve_session(log, args.session)
        await require_session(log, key)
        with cli_errors():
            message_id = await send_inject(
                log, key, args.text, caller=caller, via="cli", wake=args.wake
            )
    if args.json:
        emit_json({"session": str(key), "message_id": message_id, "woke": args.wake})
    else:
        woke = " and woke it" if args.wake else ""
        print(f"queued message {message_id} for {key}{woke}")
    return Exit.OK


async def cmd_control(args: argparse.Namespace) -> int:
    """Send pause (``pause``), resume (``unpause``), stop (``stop``) or wake (``wake``) to a
    session."""
    action = CONTROL_ACTIONS[args.command]
    caller = caller_of(args)
    async with open_log(args) as log:
        key = await resolve_session(log, args.session)
        await require_session(log, key)
        with cli_errors():
            await send_control(log, key, action, caller=caller, via="cli")
    if args.json:
        emit_json({"session": str(key), "action": action})
    else:
        print(_DONE[args.command].format(key=key))
    return Exit.OK

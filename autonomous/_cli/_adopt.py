"""``autonomous adopt --spec PATH SESSION... | --all``: record a spec file as the spec of
sessions, without running them.

A daemon refuses a session whose spec file is not the version the session recorded (another
worker may have that version); after an edit every session of the spec is ``blocked`` in
``ls``. Adopting records the file as it is now, as ``resume --spec`` does, but runs nothing:
the daemon then runs each session when it is due.
"""

from __future__ import annotations

import argparse

from eventlog import EventLog, SessionKey

from ..spec._spec import AgentSpec
from ._common import (
    CliError,
    adopt_loaded,
    emit_json,
    load_spec_or_fail,
    open_log,
    require_session,
    resolve_session,
    spec_note,
)
from ._exits import Exit


def add_adopt_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``adopt``."""
    parser.add_argument(
        "--spec",
        required=True,
        metavar="PATH",
        help="the agent spec to record (checked as strictly as validate: a spec with errors is"
        " refused and nothing is recorded)",
    )
    parser.add_argument(
        "sessions",
        nargs="*",
        metavar="SESSION",
        help="app/user/session_id, or a session id unique in the log",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every session that recorded this spec file and a version of it other than the"
        " file's now (an edit blocked them), but completed ones",
    )


async def cmd_adopt(args: argparse.Namespace) -> int:
    """Record the spec for the sessions named (or, with ``--all``, every session of the file
    whose recorded version differs); print which were adopted and which had it already."""
    if bool(args.sessions) == bool(args.all):
        raise CliError("adopt: name the sessions, or pass --all (not both)")
    spec = load_spec_or_fail(args.spec)
    adopted: list[SessionKey] = []
    unchanged: list[SessionKey] = []
    async with open_log(args) as log:
        keys = await _changed_sessions(log, spec) if args.all else await _named(log, args)
        for key in keys:
            _, recorded = await adopt_loaded(log, key, spec)
            (adopted if recorded else unchanged).append(key)
    path = str(spec.path.absolute())
    if args.json:
        emit_json(
            {
                "spec": path,
                "adopted": [str(k) for k in adopted],
                "unchanged": [str(k) for k in unchanged],
            }
        )
        return Exit.OK
    for key in adopted:
        print(f"adopted {path} for {key}")
    for key in unchanged:
        print(f"{key} records {path} as it is already")
    if args.all and not keys:
        print(f"no session records another version of {path}")
    return Exit.OK


async def _named(log: EventLog, args: argparse.Namespace) -> list[SessionKey]:
    """The sessions named on the command line, each one that exists in the log."""
    keys = []
    for text in args.sessions:
        key = await resolve_session(log, text)
        await require_session(log, key)
        keys.append(key)
    return keys


async def _changed_sessions(log: EventLog, spec: AgentSpec) -> list[SessionKey]:
    """The sessions, completed ones aside, whose newest spec note names ``spec``'s file with
    another identity than the file's now."""
    path, identity = str(spec.path.absolute()), spec.identity
    keys = []
    for summary in await log.sessions():
        if summary.stop_reason == "completed":
            continue  # nothing will run it again
        note = await spec_note(log, summary.key)
        if note is not None and note["spec"] == path and note.get("digest") != identity:
            keys.append(summary.key)
    return keys

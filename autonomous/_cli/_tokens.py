"""``autonomous token``: create, list and revoke the HTTP API's tokens kept in the event log.

``create`` prints the secret once, alone on standard output (``--json``: in the document), and
the log keeps only its digest: nobody can show it again. ``ls`` never shows a secret or a
digest. A token's name is never reused, so that the events its holder authored name one holder.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from eventlog import TokenExists, TokenRecord, UnknownToken, utcnow

from ..spec._durations import parse_duration
from ._common import CliError, emit_json, open_log
from ._exits import Exit
from ._times import show_time

if TYPE_CHECKING:
    from types import ModuleType

#: The scopes, as ``--scope`` takes them (the server's :class:`~autonomous.server.Scope`).
SCOPES = ("viewer", "operator", "admin")
#: What a user without the server's dependencies installs.
SERVER_EXTRA = "pip install 'bounded-autonomous[server]'"


def add_token_commands(token: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """The sub-commands of ``token``: create, ls, revoke (each with the common options)."""
    sub = token.add_subparsers(dest="token_command", required=True, metavar="COMMAND")

    def add(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, parents=[common])

    p = add(
        "create",
        "make a token for the HTTP API and print its secret, once: the log keeps only its digest",
    )
    p.add_argument("name", help="the token's name, unique for good: the author of its requests")
    p.add_argument(
        "--scope",
        required=True,
        metavar="|".join(SCOPES),
        help="viewer reads states and events without content; operator also reads content"
        " and controls sessions; admin also manages tokens",
    )
    p.add_argument("--app", help="limit the token to this app's sessions (default: every app)")
    p.add_argument(
        "--expires",
        metavar="DURATION",
        help="the token expires this long from now (30d, 12h, seconds; default: never)",
    )

    add("ls", "list the tokens (never a secret): scope, app, status, created, expires")

    p = add("revoke", "revoke a token: its requests are refused from now on (its name stays)")
    p.add_argument("name", help="the token's name")


async def cmd_token(args: argparse.Namespace) -> int:
    """Run ``token create``, ``token ls`` or ``token revoke``."""
    if args.token_command == "create":
        return await _create(args)
    if args.token_command == "ls":
        return await _list(args)
    return await _revoke(args)


async def _create(args: argparse.Namespace) -> int:
    """Keep a new token; print its secret, the one time it is ever shown."""
    tokens = _server_tokens()
    if args.scope not in SCOPES:
        raise CliError(f"--scope must be one of {', '.join(SCOPES)}, not {args.scope!r}")
    now = utcnow()
    expires_at = None if args.expires is None else _expiry(args.expires, now)
    secret = tokens.new_secret()
    try:
        record = TokenRecord(
            args.name,
            args.scope,
            tokens.digest(secret),
            now,
            app=args.app,
            expires_at=expires_at,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    async with open_log(args, create=True) as log:
        try:
            await log.create_token(record)
        except TokenExists as exc:
            raise CliError(str(exc), Exit.ERROR) from None
    if args.json:
        emit_json({**_as_dict(record, now), "secret": secret})
        return Exit.OK
    print(secret, flush=True)
    print(
        f"token {record.name!r} created ({_terms(record, utc=args.utc)}): its secret, above,"
        " is shown this once and never again",
        file=sys.stderr,
    )
    return Exit.OK


async def _list(args: argparse.Namespace) -> int:
    """The log's tokens, oldest first; never a secret or a digest."""
    now = utcnow()
    async with open_log(args) as log:
        tokens = await log.tokens()
    if args.json:
        emit_json([_as_dict(token, now) for token in tokens])
        return Exit.OK
    if not tokens:
        print("no tokens")
        return Exit.OK
    header = ("NAME", "SCOPE", "APP", "STATUS", "CREATED", "EXPIRES")
    table = [header] + [
        (
            t.name,
            t.scope,
            t.app or "*",
            _status_text(t, now, utc=args.utc),
            show_time(t.created_at, utc=args.utc),
            show_time(t.expires_at, utc=args.utc) if t.expires_at is not None else "never",
        )
        for t in tokens
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return Exit.OK


async def _revoke(args: argparse.Namespace) -> int:
    """Revoke a token by name; revoking it again says when it was."""
    async with open_log(args) as log:
        before = {t.name: t for t in await log.tokens()}.get(args.name)
        try:
            token = await log.revoke_token(args.name)
        except UnknownToken as exc:
            raise CliError(str(exc), Exit.ERROR) from None
    if args.json:
        emit_json(_as_dict(token, utcnow()))
    elif before is not None and before.revoked_at is not None and token.revoked_at is not None:
        when = show_time(token.revoked_at, utc=args.utc)
        print(f"token {token.name!r} was revoked already, {when}")
    else:
        print(f"revoked token {token.name!r}: its requests are refused from now on")
    return Exit.OK


def _server_tokens() -> ModuleType:
    """``autonomous.server._tokens``, imported now: it needs the [server] extra."""
    try:
        from ..server import _tokens
    except ImportError as exc:
        raise CliError(
            f"tokens are the HTTP API's, whose dependencies are not installed ({exc}):"
            f" {SERVER_EXTRA}",
            Exit.USAGE,
        ) from None
    return _tokens


def _expiry(text: str, now: datetime) -> datetime:
    """When a token made ``now`` expires, by ``--expires``: a duration of more than 0
    seconds."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise CliError(f"--expires: {exc}") from None
    if not seconds > 0:  # NaN is not either
        raise CliError(f"--expires must be more than 0 seconds, not {text!r}")
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:
        raise CliError(f"--expires {text!r} is too far in the future") from None


def _as_dict(token: TokenRecord, now: datetime) -> dict[str, Any]:
    """A token as ``--json`` shows it: never its digest."""
    return {
        "name": token.name,
        "scope": token.scope,
        "app": token.app,
        "status": token.status(now),
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "revoked_at": token.revoked_at,
    }


def _terms(token: TokenRecord, *, utc: bool) -> str:
    """``operator, app billing, expires 2026-...``: what a new token may do, and until when."""
    app = f"app {token.app}" if token.app is not None else "every app"
    until = (
        f"expires {show_time(token.expires_at, utc=utc)}"
        if token.expires_at is not None
        else "never expires"
    )
    return f"{token.scope}, {app}, {until}"


def _status_text(token: TokenRecord, now: datetime, *, utc: bool) -> str:
    """The status as ``ls`` shows it: ``revoked`` with its time, else ``active``/``expired``."""
    if token.revoked_at is not None:
        return f"revoked {show_time(token.revoked_at, utc=utc)}"
    return token.status(now)

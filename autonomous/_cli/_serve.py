"""``autonomous serve``: the HTTP control API over one event log, served by uvicorn until a
signal.

Who may call it is decided once per request, by the log: a log that has ever had a token (see
``autonomous token``) needs one on every request. A log that never had one is a first hour on
one's own machine: on a loopback address the server answers everyone as an admin, and says so
loudly at start; on any other address it refuses to start, unless told ``--insecure-no-auth``
(behind a proxy that checks callers itself, say). Deciding per request, not at start, means a
token created while the server runs closes it at once.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from typing import TYPE_CHECKING

from ._common import CliError, open_log
from ._signals import until_signal
from ._tokens import SERVER_EXTRA

if TYPE_CHECKING:
    from starlette.requests import Request

    from eventlog import EventLog

    from ..server import Authenticate, Principal

#: Where the server listens unless ``--listen`` says otherwise.
DEFAULT_LISTEN = "127.0.0.1:8700"


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """The ``serve`` command's options."""
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"the address to serve on (default {DEFAULT_LISTEN}; port 0: any free port)",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve a log without tokens on a non-loopback address: everyone is an admin",
    )


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a host and a port, or a CliError naming it."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CliError(f"--listen wants HOST:PORT (such as 127.0.0.1:8700), not {text!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (127.0.0.0/8, ::1 or localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_or_tokens(log: EventLog) -> Authenticate:
    """The log's tokens once it has any; before that, everyone as an admin."""
    from ..server import Principal, Scope, token_auth

    tokens = token_auth(log)
    anyone = Principal("anonymous", Scope.ADMIN)

    async def authenticate(request: Request) -> Principal | None:
        if await log.tokens():
            return await tokens(request)
        return anyone

    return authenticate


async def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the API over ``--db`` until SIGINT/SIGTERM."""
    host, port = parse_listen(args.listen)
    try:
        from ..server import create_app
        from ..server._uvicorn import serve_until_cancelled
    except ImportError as exc:
        raise CliError(f"serve needs the server's dependencies ({exc}): {SERVER_EXTRA}") from None
    async with open_log(args, create=True) as log:
        auth = None
        if not await log.tokens():
            if not (is_loopback(host) or args.insecure_no_auth):
                raise CliError(
                    f"the log has no tokens: refusing to serve {host} without them; create one"
                    " (autonomous token create NAME --scope operator) or pass --insecure-no-auth"
                )
            print(
                "WARNING: the log has no tokens: every request is answered as an admin until"
                " one is created (autonomous token create NAME --scope operator)",
                file=sys.stderr,
            )
            auth = open_or_tokens(log)
        app = create_app(log, auth=auth)
        listening = _bind(host, port)
        bound = listening.getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        print(f"serving http://{shown}:{bound[1]}", flush=True)
        await until_signal(lambda: serve_until_cancelled(app, listening))
    return 0


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound here so that port 0 can be shown."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock

"""Who a request is: a principal with a scope, and the hook that says so.

The server asks one question of every request: who is this, and what may they do? The answer is
a :class:`Principal` (a name, recorded as the author of every control event it makes; a scope;
optionally the one app it is limited to), or None for a request that proved nothing (401). The
hook is a plain async function of the request, so that an embedder's own check (a JWT, an OIDC
session, a mutual-TLS header) is as good as the log's tokens: the server never sees a secret
except through it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable

import attrs
from starlette.requests import Request


class Scope(enum.StrEnum):
    """What a principal may do, each scope everything of the one before it and more.

    ``viewer`` reads states and events without their content (messages, tool arguments and
    results); ``operator`` also reads content and controls sessions; ``admin`` also manages
    tokens.
    """

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """The scope's place in viewer < operator < admin."""
        return list(Scope).index(self)


@attrs.frozen
class Principal:
    """The caller of a request: ``name`` (the author of the events it appends), ``scope``, and
    ``app``, the one app whose sessions it sees (None: every app)."""

    name: str
    scope: Scope
    app: str | None = None

    def may(self, needed: Scope) -> bool:
        """Whether this principal's scope includes ``needed``."""
        return self.scope.rank >= needed.rank

    def sees(self, app: str) -> bool:
        """Whether this principal may see sessions of ``app`` (others are 404 to it, never
        403: their existence does not leak)."""
        return self.app is None or self.app == app


#: The server's authentication hook: the principal a request proves, or None (401).
Authenticate = Callable[[Request], Awaitable[Principal | None]]


def bearer_secret(request: Request) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header, if the request has one."""
    header = request.headers.get("authorization", "")
    kind, _, secret = header.partition(" ")
    if kind.lower() != "bearer" or not secret.strip():
        return None
    return secret.strip()

"""The log's API tokens as the server's authentication: secrets made, digested, and checked.

A token's secret is shown once, when it is made (``autonomous token create``), and never kept:
the log keeps its SHA-256 digest (:class:`eventlog.TokenRecord`). A request's bearer secret is
digested at once and only the digest goes on: the store is searched by it, the match compared
again in constant time. So the secret is in no log line, error message or traceback of ours:
the one frame that holds it (:func:`_digest_of`) has returned before anything else happens.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request

from eventlog import EventLog, Now, utcnow

from .._logging import get_logger
from ._auth import Authenticate, Principal, Scope, bearer_secret

#: What every secret begins with: a secret pasted in the wrong place is recognisable (secret
#: scanners match it), and a secret of another system is told apart at a glance.
PREFIX = "ba_"

_logger = get_logger(__name__)


def new_secret() -> str:
    """A new token secret: :data:`PREFIX` and 32 random bytes, URL-safe base64 (43
    characters)."""
    return PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    """The SHA-256 of ``secret`` (UTF-8) as 64 lowercase hex digits: what the log keeps.

    A plain hash is enough: a secret is 256 random bits, which no dictionary holds and no
    slow hash would protect better.
    """
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def token_auth(log: EventLog, *, now: Now = utcnow) -> Authenticate:
    """The server's authentication by the tokens ``log`` keeps (``autonomous token create``).

    A request carrying ``Authorization: Bearer <secret>`` of a token that is neither revoked
    nor expired (at ``now()``) is that token's :class:`Principal`: its name, scope and app.
    Anything else is None (401): no header, an unknown secret, a revoked or expired token, or
    one whose scope this server does not know. Revoking a token takes effect on its next
    request: nothing is cached. A store that fails raises its own error (the server's 503),
    which names no secret.
    """

    async def authenticate(request: Request) -> Principal | None:
        wanted = _digest_of(request)
        if wanted is None:
            return None
        record = await log.token_by_digest(wanted)
        # found by its digest already; compared again in constant time, so that no store's
        # lookup (an index, a dict) is what decides
        if record is None or not hmac.compare_digest(record.digest, wanted):
            _logger.info("token_refused", reason="unknown")
            return None
        status = record.status(now())
        if status != "active":
            _logger.info("token_refused", reason=status, token=record.name)
            return None
        try:
            scope = Scope(record.scope)
        except ValueError:
            _logger.warning("token_refused", reason="unknown_scope", token=record.name)
            return None
        return Principal(record.name, scope, record.app)

    return authenticate


def _digest_of(request: Request) -> str | None:
    """The digest of the request's bearer secret (None without one); the secret goes no
    further than this frame."""
    secret = bearer_secret(request)
    return None if secret is None else digest(secret)

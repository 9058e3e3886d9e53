"""Retry policies for the ``retry_policy`` option: transient provider errors retried with backoff.

::

    from autonomous import retry

    result = await run_autonomous(build, goal, retry_policy=retry.transient(attempts=5))

:func:`transient` retries a turn that failed on a transient error (HTTP 408, 409, 425, 429, any
5xx, a timeout, a dropped connection) at most ``attempts`` times in a row, and ends the run at
once on anything else (401, 400, 404, a bad request, a bug). Before each retry the run waits:
the provider's ``Retry-After`` when it sent one (held to ``max_retry_after``), else exponential
backoff with full jitter held to ``cap``. The loop asks the policy's ``delay(error, attempt)``
after a ``RETRY_TURN`` decision and waits on the run's clock: the wait counts against
``max_wallclock`` and a stop ends it.

A policy is a :class:`RetryPolicy`: ``policy(error, attempt) -> RetryDecision`` and
``policy.delay(error, attempt) -> seconds``. The ``retry_policy`` option also takes a plain
``(error, attempt) -> RetryDecision`` function, made a policy that never waits
(:func:`as_policy`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Protocol, runtime_checkable

import attrs

from ._errors import ModelError, TurnTimeout
from ._result import RetryDecision

__all__ = [
    "RetryFunction",
    "RetryPolicy",
    "TransientRetry",
    "as_policy",
    "is_transient",
    "parse_retry_after",
    "transient",
]

#: A plain policy: ``(error, attempt) -> RetryDecision``, ``attempt`` counting the consecutive
#: failures of one turn from 1.
RetryFunction = Callable[[BaseException, int], RetryDecision]


@runtime_checkable
class RetryPolicy(Protocol):
    """What a run asks after a failed turn: what to do, and how long to wait before a retry."""

    def __call__(self, error: BaseException, attempt: int) -> RetryDecision:
        """``RETRY_TURN``, ``SKIP_TURN`` or ``ABORT_RUN`` after failure ``attempt`` (from 1)
        of a turn; raising aborts the run."""
        ...

    def delay(self, error: BaseException, attempt: int) -> float:
        """Seconds to wait, on the run's clock, before the retry ``__call__`` asked for (0, a
        negative number, or one that is not finite: none; raising: none, and logged)."""
        ...


@attrs.frozen
class _AtOnce:
    """A plain ``(error, attempt) -> RetryDecision`` function as a policy: it never waits."""

    decide: RetryFunction

    def __call__(self, error: BaseException, attempt: int) -> RetryDecision:
        return self.decide(error, attempt)

    def delay(self, error: BaseException, attempt: int) -> float:
        """No wait: a plain function says nothing of one."""
        return 0.0


def as_policy(policy: RetryPolicy | RetryFunction) -> RetryPolicy:
    """``policy`` when it is a :class:`RetryPolicy` (it has ``delay``); a plain function made
    one that retries at once, as the ``retry_policy`` option takes it."""
    if isinstance(policy, RetryPolicy):
        return policy
    return _AtOnce(policy)


#: HTTP statuses worth another try: timeout, conflict, too early, too many requests (and 5xx).
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
#: Exception class names (anywhere in the cause chain) that mean the request never got an answer.
#: (Not litellm's APIConnectionError: it also wraps causes no retry cures, such as a response
#: nested too deeply to parse; litellm gives it a status, and ModelError carries that.)
_TRANSIENT_NAMES = frozenset(
    {"APITimeoutError", "Timeout", "ConnectError", "ConnectTimeout", "ReadTimeout",
     "RemoteProtocolError"}
)  # fmt: skip


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and its causes, each once (a cause chain can loop)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _status(error: ModelError) -> int | None:
    """The HTTP status a model error carries, if any."""
    status = error.status
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is worth another try: an HTTP 408/409/425/429/5xx, a turn timeout, a
    timeout or a dropped connection. A status that says otherwise (401, 400, 404) wins."""
    for cause in _chain(error):
        status = _status(cause) if isinstance(cause, ModelError) else None
        if status is not None:
            return status in _TRANSIENT_STATUSES or 500 <= status <= 599
        if isinstance(cause, TurnTimeout | TimeoutError | ConnectionError):
            return True
        if type(cause).__name__ in _TRANSIENT_NAMES:
            return True
    return False


def parse_retry_after(value: str, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date (relative
    to ``now``, a past date is 0); None when it is neither."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP-date is always GMT
            when = when.replace(tzinfo=UTC)
        seconds = (when - now).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def _retry_after(error: BaseException) -> float | None:
    """The Retry-After a model error in the chain carries (seconds), if any."""
    for cause in _chain(error):
        after = cause.retry_after if isinstance(cause, ModelError) else None
        if isinstance(after, int | float) and not isinstance(after, bool):
            return float(after)
    return None


def _check_attempts(_policy: TransientRetry, _field: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"attempts must be an integer >= 0, got {value!r}")


def _check_seconds(_policy: TransientRetry, field: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{field.name} must be seconds >= 0, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{field.name} must be finite, got {value!r}")


@attrs.frozen
class TransientRetry:
    """A retry policy: retry transient errors up to ``attempts`` times in a row, waiting first.

    Call it as the run does, ``policy(error, attempt) -> RetryDecision`` (``attempt`` counts the
    consecutive failures of one turn, from 1); :meth:`delay` gives the wait before the retry.
    ``attempts`` is the number of retries a failing turn gets (0: never retried).
    The backoff before retry ``n`` is ``min(cap, base * 2 ** (n - 1))``, a uniform draw from 0
    to that with ``jitter`` ("full jitter"); a provider's ``Retry-After`` replaces it, held to
    ``max_retry_after``. ``rand`` gives numbers in [0, 1) (injectable for tests).
    """

    attempts: int = attrs.field(default=5, validator=_check_attempts)
    base: float = attrs.field(default=1.0, validator=_check_seconds)
    cap: float = attrs.field(default=60.0, validator=_check_seconds)
    jitter: bool = True
    max_retry_after: float = attrs.field(default=300.0, validator=_check_seconds)
    rand: Callable[[], float] = attrs.field(default=random.random, eq=False, repr=False)

    def __call__(self, error: BaseException, attempt: int) -> RetryDecision:
        """RETRY_TURN for a transient error while retries are left, else ABORT_RUN."""
        if attempt <= self.attempts and is_transient(error):
            return RetryDecision.RETRY_TURN
        return RetryDecision.ABORT_RUN

    def backoff(self, attempt: int) -> float:
        """The most the wait before retry ``attempt`` can be without a Retry-After."""
        exponent = min(max(attempt - 1, 0), 64)  # 2**64 seconds is past any cap already
        return float(min(self.cap, self.base * 2.0**exponent))

    def delay(self, error: BaseException, attempt: int) -> float:
        """Seconds to wait before retrying after failure ``attempt`` of a turn."""
        after = _retry_after(error)
        if after is not None:
            return min(after, self.max_retry_after)
        most = self.backoff(attempt)
        return most * self.rand() if self.jitter else most


def transient(
    attempts: int = 5,
    base: float = 1.0,
    cap: float = 60.0,
    jitter: bool = True,
    *,
    max_retry_after: float = 300.0,
) -> TransientRetry:
    """A :class:`TransientRetry`: ``attempts`` retries of transient errors, backoff from
    ``base`` seconds doubling up to ``cap``, full ``jitter``, Retry-After up to
    ``max_retry_after``."""
    return TransientRetry(attempts, base, cap, jitter, max_retry_after)

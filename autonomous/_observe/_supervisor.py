"""The supervisor: consulted at each turn boundary, it says continue, steer, pause or abort.

Map:
    Proceed, Steer, PauseRun, AbortRun   the decisions (frozen values); ``SupervisorDecision``
    SupervisorSnapshot, BudgetsLeft      what a supervisor sees: numbers and content-free events
    RecentEvents                         the driver's window over progress events -> snapshots
    consult                              call any supervisor, bounded by a timeout, failing open
    RulesSupervisor                      deterministic rules (error streaks, cost thresholds)
    LLMJudge                             asks a (cheap) model every N turns: in ``_judge.py``,
                                         which builds on this module (not re-exported here)
    steer_message                        frames steer text as guidance for the agent

A supervisor sees no prompt, argument or result text: only counts, money, time and the typed
progress events of :mod:`autonomous._progress`, which are content-free by construction.
"""

from __future__ import annotations

import collections
import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import attrs

from scheduler import Clock, SystemClock

from .._errors import ConfigurationError
from .._logging import get_logger
from .._progress import ProgressEvent, ToolCalled, TurnFinished

__all__ = [
    "AbortRun",
    "BudgetsLeft",
    "PauseRun",
    "Proceed",
    "RecentEvents",
    "RulesSupervisor",
    "Steer",
    "Supervisor",
    "SupervisorDecision",
    "SupervisorFunction",
    "SupervisorSnapshot",
    "budgets_left",
    "consult",
    "steer_message",
]

_log = get_logger("autonomous.supervisor")

#: How many of the newest progress events a snapshot carries.
MAX_RECENT_EVENTS = 50
#: Tool outcomes that extend the consecutive tool-error streak ("ok" ends it).
_TOOL_ERROR_OUTCOMES = frozenset({"error", "timeout"})


# --------------------------------------------------------------------------- decisions


@attrs.frozen
class Proceed:
    """Go on with the next turn as planned."""


@attrs.frozen
class Steer:
    """Go on, with ``message`` given to the agent as guidance (see :func:`steer_message`)."""

    message: str


@attrs.frozen
class PauseRun:
    """Park the run at this turn boundary until someone resumes it (or ``pause_max`` passes)."""

    reason: str = ""


@attrs.frozen
class AbortRun:
    """End the run now, with stop reason ``aborted`` and this ``reason``."""

    reason: str


#: What a supervisor returns at a turn boundary.
SupervisorDecision = Proceed | Steer | PauseRun | AbortRun
_DECISIONS = (Proceed, Steer, PauseRun, AbortRun)


# --------------------------------------------------------------------------- snapshot


@attrs.frozen
class BudgetsLeft:
    """What is left of each budget; ``None`` means that budget is uncapped."""

    turns: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    wallclock: float | None = None


@attrs.frozen
class SupervisorSnapshot:
    """The run as a supervisor sees it before turn ``turn``: usage, budgets, recent events.

    ``turns_done`` counts executed turns (failed attempts included, carried over on resume);
    ``elapsed`` is this process's wall-clock seconds. ``recent_events`` holds the newest
    (at most 50) progress events, oldest first. ``consecutive_tool_errors`` counts tool calls
    that ended in ``error`` or ``timeout`` since the last ``ok`` one;
    ``consecutive_turn_errors`` counts failed turns since the last good one, and
    ``last_turn_error`` is the last turn's error type name (``None`` when it succeeded).
    """

    turn: int
    turns_done: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    elapsed: float = 0.0
    budgets_left: BudgetsLeft = BudgetsLeft()
    recent_events: tuple[ProgressEvent, ...] = ()
    consecutive_tool_errors: int = 0
    last_turn_error: str | None = None
    consecutive_turn_errors: int = 0


class _Caps(Protocol):
    """The run's caps, as ``RunOptions`` holds them (0 = uncapped)."""

    @property
    def max_turns(self) -> int: ...
    @property
    def max_input_tokens(self) -> int: ...
    @property
    def max_output_tokens(self) -> int: ...
    @property
    def max_cost_usd(self) -> float: ...
    @property
    def max_wallclock(self) -> float: ...


class _Spending(Protocol):
    """What the run has spent, as its ``Spending`` value holds it (``_state``, a layer above
    this one, defines that value; snapshots read these fields of it)."""

    @property
    def turns(self) -> int: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cost_usd(self) -> float: ...


def budgets_left(caps: _Caps, spent: _Spending, elapsed: float) -> BudgetsLeft:
    """What is left of each cap (never below zero); a zero cap is uncapped (``None``)."""
    return BudgetsLeft(
        turns=max(0, caps.max_turns - spent.turns) if caps.max_turns else None,
        input_tokens=(
            max(0, caps.max_input_tokens - spent.input_tokens) if caps.max_input_tokens else None
        ),
        output_tokens=(
            max(0, caps.max_output_tokens - spent.output_tokens) if caps.max_output_tokens else None
        ),
        cost_usd=max(0.0, caps.max_cost_usd - spent.cost_usd) if caps.max_cost_usd else None,
        wallclock=max(0.0, caps.max_wallclock - elapsed) if caps.max_wallclock else None,
    )


@attrs.define(eq=False)
class RecentEvents:
    """The driver's window over a run's progress events, from which snapshots are taken.

    The run's observer feeds it (:meth:`record`) every progress event but a call's start, once
    the log has what the event reports; it keeps the newest ``size`` events and the error
    streaks. One per run; not shared between runs.
    """

    size: int = MAX_RECENT_EVENTS
    consecutive_tool_errors: int = attrs.field(default=0, init=False)
    consecutive_turn_errors: int = attrs.field(default=0, init=False)
    last_turn_error: str | None = attrs.field(default=None, init=False)
    _events: collections.deque[ProgressEvent] = attrs.field(init=False)

    @_events.default
    def _window(self) -> collections.deque[ProgressEvent]:
        return collections.deque(maxlen=self.size)

    def record(self, event: ProgressEvent) -> None:
        """Remember ``event`` and update the streaks it ends or extends."""
        self._events.append(event)
        if isinstance(event, ToolCalled):
            if event.outcome in _TOOL_ERROR_OUTCOMES:
                self.consecutive_tool_errors += 1
            elif event.outcome == "ok":
                self.consecutive_tool_errors = 0
        elif isinstance(event, TurnFinished):
            self.last_turn_error = event.error
            self.consecutive_turn_errors = (
                self.consecutive_turn_errors + 1 if event.error is not None else 0
            )

    @property
    def events(self) -> tuple[ProgressEvent, ...]:
        """The remembered events, oldest first."""
        return tuple(self._events)

    def snapshot(
        self, turn: int, *, caps: _Caps, spent: _Spending, elapsed: float
    ) -> SupervisorSnapshot:
        """The snapshot for a supervisor consulted before turn ``turn``."""
        return SupervisorSnapshot(
            turn=turn,
            turns_done=spent.turns,
            input_tokens=spent.input_tokens,
            output_tokens=spent.output_tokens,
            cost_usd=spent.cost_usd,
            elapsed=elapsed,
            budgets_left=budgets_left(caps, spent, elapsed),
            recent_events=self.events,
            consecutive_tool_errors=self.consecutive_tool_errors,
            last_turn_error=self.last_turn_error,
            consecutive_turn_errors=self.consecutive_turn_errors,
        )


# --------------------------------------------------------------------------- consulting


class Supervisor(Protocol):
    """Consulted at each turn boundary with a snapshot; returns what the run does next.

    Plain functions (sync or async) taking a snapshot work too: see :func:`consult`.
    """

    async def __call__(self, snapshot: SupervisorSnapshot, /) -> SupervisorDecision:
        """The decision for the turn boundary ``snapshot`` describes."""
        ...


#: What :func:`consult` takes: a :class:`Supervisor`, or any function of a snapshot, sync or
#: async, that returns a decision or ``None`` ("no opinion").
SupervisorFunction = Callable[
    [SupervisorSnapshot], SupervisorDecision | Awaitable[SupervisorDecision | None] | None
]


async def consult(
    supervisor: SupervisorFunction,
    snapshot: SupervisorSnapshot,
    *,
    timeout: float | None,  # noqa: ASYNC109 - expiry fails open; a caller's scope would cancel
    clock: Clock | None = None,
) -> SupervisorDecision | None:
    """Ask ``supervisor`` (sync or async) for a decision, within ``timeout`` seconds.

    Returns ``None`` (fail open: the run goes on) when the supervisor raises, times out or
    returns something that is not a decision; each is logged as a warning with the error's
    type name only. A supervisor returning ``None`` means "no opinion": :class:`Proceed`.
    ``timeout`` ``None`` or ``math.inf`` means no bound; a sync supervisor cannot be
    interrupted, so keep those fast. The caller's own cancellation always propagates.
    The timeout runs on ``clock`` (the run's; the real clock when None).
    """
    name = getattr(supervisor, "__qualname__", type(supervisor).__qualname__)
    limit = None if timeout is None or math.isinf(timeout) else timeout
    with (clock or SystemClock()).move_on_after(limit) as scope:
        try:
            decision = supervisor(snapshot)
            if inspect.isawaitable(decision):
                decision = await decision
        except Exception as exc:  # cancellation is a BaseException: it is never caught here
            _log.warning(
                "supervisor_failed", turn=snapshot.turn, supervisor=name, error=type(exc).__name__
            )
            return None
    if scope.cancelled_caught:
        _log.warning("supervisor_timeout", turn=snapshot.turn, supervisor=name, timeout=timeout)
        return None
    if decision is None:
        return Proceed()
    if not isinstance(decision, _DECISIONS):
        _log.warning(
            "supervisor_bad_decision",
            turn=snapshot.turn,
            supervisor=name,
            returned=type(decision).__name__,
        )
        return None
    return decision


def steer_message(text: str) -> str:
    """``text`` framed as supervisor guidance that changes neither tools, outcomes nor task."""
    return (
        f"[Supervisor guidance] {text.strip()}\n"
        "(This is guidance from your supervisor. It does not change your tools, "
        "your outcome set, or the task itself.)"
    )


# --------------------------------------------------------------------------- rules


#: A rule: a decision when it fires, ``None`` when it has nothing to say.
Rule = Callable[[SupervisorSnapshot], SupervisorDecision | None]


def _at_least(name: str, value: int | None, minimum: int) -> int | None:
    if value is not None and (isinstance(value, bool) or value < minimum):
        raise ConfigurationError(f"{name} must be an integer >= {minimum} or None, got {value!r}")
    return value


def _non_negative(name: str, value: float | None) -> float | None:
    if value is not None and not value >= 0:
        raise ConfigurationError(f"{name} must be a number >= 0 or None, got {value!r}")
    return value


class RulesSupervisor:
    """A deterministic supervisor: the first rule that returns a decision wins.

    The built-in rules run first, in this order, each off when its argument is ``None``:
    abort once cost is above ``abort_when_cost_above`` USD; abort after
    ``abort_after_turn_errors`` consecutive failed turns; abort after
    ``max_consecutive_tool_errors`` consecutive tool errors or timeouts; pause once cost is
    above ``pause_when_cost_above`` USD. Then ``rules``, in order. The cost pause fires once
    per crossing of its threshold, so a run resumed after it is not paused again at once.
    Keep one instance per run: the pause rule remembers that it fired.
    """

    def __init__(
        self,
        *,
        max_consecutive_tool_errors: int | None = None,
        pause_when_cost_above: float | None = None,
        abort_when_cost_above: float | None = None,
        abort_after_turn_errors: int | None = None,
        rules: Sequence[Rule] = (),
    ) -> None:
        self.max_consecutive_tool_errors = _at_least(
            "max_consecutive_tool_errors", max_consecutive_tool_errors, 1
        )
        self.pause_when_cost_above = _non_negative("pause_when_cost_above", pause_when_cost_above)
        self.abort_when_cost_above = _non_negative("abort_when_cost_above", abort_when_cost_above)
        self.abort_after_turn_errors = _at_least(
            "abort_after_turn_errors", abort_after_turn_errors, 1
        )
        self.rules: tuple[Rule, ...] = tuple(rules)
        for rule in self.rules:
            if not callable(rule):
                raise ConfigurationError(f"every rule must be callable, got {rule!r}")
        self._cost_pause_armed = True

    async def __call__(self, snapshot: SupervisorSnapshot, /) -> SupervisorDecision:
        """The decision for ``snapshot`` (see :meth:`decide`)."""
        return self.decide(snapshot)

    def decide(self, snapshot: SupervisorSnapshot) -> SupervisorDecision:
        """The first decision a rule returns for ``snapshot``, else :class:`Proceed`."""
        for builtin in (
            self._abort_on_cost,
            self._abort_on_turn_errors,
            self._abort_on_tool_errors,
        ):
            decision = builtin(snapshot)
            if decision is not None:
                return decision
        decision = self._pause_on_cost(snapshot)
        if decision is not None:
            return decision
        for rule in self.rules:
            decision = rule(snapshot)
            if decision is None:
                continue
            if not isinstance(decision, _DECISIONS):
                raise TypeError(f"rule {rule!r} returned {decision!r}, not a decision or None")
            return decision
        return Proceed()

    def _abort_on_cost(self, snapshot: SupervisorSnapshot) -> SupervisorDecision | None:
        limit = self.abort_when_cost_above
        if limit is not None and snapshot.cost_usd > limit:
            return AbortRun(f"cost ${snapshot.cost_usd:.4f} is above ${limit:.4f}")
        return None

    def _abort_on_turn_errors(self, snapshot: SupervisorSnapshot) -> SupervisorDecision | None:
        limit = self.abort_after_turn_errors
        if limit is not None and snapshot.consecutive_turn_errors >= limit:
            return AbortRun(
                f"{snapshot.consecutive_turn_errors} consecutive failed turns "
                f"(last: {snapshot.last_turn_error})"
            )
        return None

    def _abort_on_tool_errors(self, snapshot: SupervisorSnapshot) -> SupervisorDecision | None:
        limit = self.max_consecutive_tool_errors
        if limit is not None and snapshot.consecutive_tool_errors >= limit:
            return AbortRun(f"{snapshot.consecutive_tool_errors} consecutive tool errors")
        return None

    def _pause_on_cost(self, snapshot: SupervisorSnapshot) -> SupervisorDecision | None:
        limit = self.pause_when_cost_above
        if limit is None:
            return None
        if snapshot.cost_usd <= limit:
            self._cost_pause_armed = True  # below again: the next crossing pauses again
            return None
        if not self._cost_pause_armed:
            return None
        self._cost_pause_armed = False
        return PauseRun(f"cost ${snapshot.cost_usd:.4f} passed ${limit:.4f}")

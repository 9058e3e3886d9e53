"""The run options shared by run_autonomous, start_autonomous and resume_autonomous."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import attrs

from permissions import Gate
from scheduler import Clock, Scheduler, SystemClock
from usage import Pricing, Tracker

from ._errors import ConfigurationError
from ._result import RetryDecision

#: ``async (turn_no) -> None``; raising aborts the run with ``retry_policy_aborted``.
BeforeTurn = Callable[[int], Awaitable[None]]
#: ``(turn, event) -> None``, sync or async; a failing callback never breaks the loop.
ProgressCallback = Callable[[int, Any], Any]
#: ``(error, attempt) -> RetryDecision``; ``attempt`` counts consecutive failures of one turn.
RetryPolicy = Callable[[BaseException, int], RetryDecision]

Seconds = float | int | timedelta


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be seconds (a number or a timedelta), not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{name} must be >= 0 seconds (0 = no limit), got {value!r}")
    return float(value)


def _count(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _money(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"max_cost_usd must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"max_cost_usd must be >= 0 (0 = no cap), got {value!r}")
    return float(value)


def _tool_name(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{name} must be a non-blank tool name, got {value!r}")
    return value


def _optional_callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise ConfigurationError(f"{name} must be callable or None, got {value!r}")
    return value


#: The default clock; it keeps no state, so every run shares one.
_SYSTEM_CLOCK = SystemClock()

_SECONDS = (
    "control_poll",
    "supervisor_timeout",
    "pause_max",
    "max_wallclock",
    "per_turn_timeout",
    "schedule_tool_max_defer",
    "max_defer",
    "tool_timeout",
    "lease_ttl",
)
_COUNTS = {
    "max_turns": 0,
    "max_input_tokens": 0,
    "max_output_tokens": 0,
    "max_model_calls_per_turn": 1,
    "max_tool_result_chars": 1,
    "history_turns": 0,
}


@attrs.frozen(kw_only=True)
class RunOptions:
    """Every option of a run, validated; built from the entry points' keyword arguments."""

    max_turns: int = 50
    max_input_tokens: int = 0
    max_output_tokens: int = 0
    max_cost_usd: float = 0.0
    max_wallclock: float = 0.0
    per_turn_timeout: float = 0.0
    continuation_prompt: str = "continue"
    done_tool_name: str = "report_done"
    done_tool_description: str | None = None
    before_turn: BeforeTurn | None = None
    progress: ProgressCallback | None = None
    retry_policy: RetryPolicy | None = None
    scheduler: Scheduler | None = None
    schedule_tool_name: str = "schedule_next_turn"
    schedule_tool_description: str | None = None
    schedule_tool_max_defer: float = 0.0
    max_defer: float = 0.0
    permissions_gate: Gate | None = None
    pricing: Pricing | None = None
    tracker: Tracker | None = None
    max_model_calls_per_turn: int = 25
    tool_timeout: float = 300.0
    max_tool_result_chars: int = 8000
    outcomes: tuple[str, ...] = ()
    result_schema: dict[str, Any] | None = None
    history_turns: int = 50
    clock: Clock = _SYSTEM_CLOCK
    lease_ttl: float = 30.0
    control_poll: float = 0.5
    supervisor: Any = None
    supervisor_timeout: float = 30.0
    pause_max: float = 0.0
    telemetry: Any = None

    def __attrs_post_init__(self) -> None:
        # Runs once per run: values that are already valid (the defaults, mostly) skip the full
        # checks, which then decide only for the rest.
        fix = object.__setattr__  # normalising a frozen instance while it is being built
        for name in _SECONDS:
            value = getattr(self, name)
            if type(value) is not float or not 0.0 <= value < math.inf:
                fix(self, name, _seconds(name, value))
        for name, minimum in _COUNTS.items():
            value = getattr(self, name)
            if type(value) is not int or value < minimum:
                _count(name, value, minimum)
        fix(self, "max_cost_usd", _money(self.max_cost_usd))
        for name in ("done_tool_name", "schedule_tool_name"):
            _tool_name(name, getattr(self, name))
        for name in ("before_turn", "progress", "retry_policy", "supervisor"):
            _optional_callable(name, getattr(self, name))
        if type(self.outcomes) is not tuple:
            fix(self, "outcomes", tuple(self.outcomes))
        if not isinstance(self.continuation_prompt, str) or not self.continuation_prompt.strip():
            raise ConfigurationError("continuation_prompt must be a non-blank string")
        if self.done_tool_name == self.schedule_tool_name:
            raise ConfigurationError(
                f"done_tool_name and schedule_tool_name are both {self.done_tool_name!r}"
            )
        if self.scheduler is not None and not hasattr(self.scheduler, "wait"):
            raise ConfigurationError(
                f"scheduler must have an async wait(event, waker) method, got {self.scheduler!r}"
            )
        for outcome in self.outcomes:
            if not isinstance(outcome, str) or not outcome.strip():
                raise ConfigurationError(f"outcomes must be non-blank strings, got {outcome!r}")
        if self.result_schema is not None and not self.outcomes:
            raise ConfigurationError("result_schema needs an outcome set (outcomes=...)")
        if len(set(self.outcomes)) != len(self.outcomes):
            raise ConfigurationError(f"outcomes has duplicates: {self.outcomes!r}")
        if self.lease_ttl <= 0 or self.control_poll <= 0:
            raise ConfigurationError("lease_ttl and control_poll must be > 0 seconds")


_OPTION_NAMES = frozenset(a.name for a in attrs.fields(RunOptions))


def make_options(kwargs: dict[str, Any]) -> RunOptions:
    """RunOptions from keyword arguments; an unknown keyword is a clear ConfigurationError."""
    if not _OPTION_NAMES.issuperset(kwargs):
        unknown = ", ".join(sorted(set(kwargs) - _OPTION_NAMES))
        raise ConfigurationError(
            f"unknown option(s) {unknown}; the options are: {', '.join(sorted(_OPTION_NAMES))}"
        )
    try:
        return RunOptions(**kwargs)
    except TypeError as exc:  # attrs raises TypeError for wrong shapes
        raise ConfigurationError(str(exc)) from exc

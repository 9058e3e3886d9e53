"""The run options shared by run_autonomous, start_autonomous and resume_autonomous."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, TypedDict

import attrs

from eventlog import Budgets
from permissions import Gate
from scheduler import Clock, Scheduler, SystemClock
from usage import Pricing, Tracker

from ._errors import ConfigurationError
from ._model import Model
from ._observe._supervisor import SupervisorFunction
from ._observe._telemetry import Telemetry
from ._progress import ProgressCallback
from .retry import RetryFunction, RetryPolicy, as_policy

#: ``async (turn_no) -> None``; raising aborts the run with ``retry_policy_aborted``.
BeforeTurn = Callable[[int], Awaitable[None]]
#: A duration as the options take it: seconds (an int or a float) or a ``timedelta``.
Seconds = float | int | timedelta


def _to_seconds(value: Seconds, field: attrs.Attribute[float]) -> float:
    """Seconds as a float: a number or a timedelta, finite and not negative."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(
            f"{field.name} must be seconds (a number or a timedelta), not {value!r}"
        )
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{field.name} must be >= 0 seconds (0 = no limit), got {value!r}")
    return float(value)


def _seconds(default: float) -> Any:
    """A seconds option (the stored value is always a float)."""
    return attrs.field(default=default, converter=attrs.Converter(_to_seconds, takes_field=True))


def _count(default: int, minimum: int = 0) -> Any:
    """A whole-number option at or above ``minimum`` (a bool is not a number here)."""

    def check(_options: RunOptions, field: attrs.Attribute[int], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigurationError(f"{field.name} must be an integer >= {minimum}, got {value!r}")

    return attrs.field(default=default, validator=check)


def _to_money(value: float) -> float:
    """US dollars as a float: a finite number, not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"max_cost_usd must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"max_cost_usd must be >= 0 (0 = no cap), got {value!r}")
    return float(value)


def _check_tool_name(_options: RunOptions, field: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{field.name} must be a non-blank tool name, got {value!r}")


def _check_callable(_options: RunOptions, field: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise ConfigurationError(f"{field.name} must be callable or None, got {value!r}")


def _to_policy(value: RetryPolicy | RetryFunction | None) -> RetryPolicy | None:
    """A callable as a retry policy (a plain function never waits); anything else as it is,
    for the check to refuse."""
    return as_policy(value) if callable(value) else value


def _check_prompt(_options: RunOptions, _field: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError("continuation_prompt must be a non-blank string")


def _check_scheduler(_options: RunOptions, _field: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not hasattr(value, "wait"):
        raise ConfigurationError(
            f"scheduler must have an async wait(event, waker) method, got {value!r}"
        )


def _to_outcomes(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _check_outcomes(
    _options: RunOptions, _field: attrs.Attribute[tuple[str, ...]], values: tuple[str, ...]
) -> None:
    for outcome in values:
        if not isinstance(outcome, str) or not outcome.strip():
            raise ConfigurationError(f"outcomes must be non-blank strings, got {outcome!r}")
    if len(set(values)) != len(values):
        raise ConfigurationError(f"outcomes has duplicates: {values!r}")


def _check_positive(_options: RunOptions, _field: attrs.Attribute[float], value: float) -> None:
    if value <= 0:
        raise ConfigurationError("lease_ttl and control_poll must be > 0 seconds")


def _positive_seconds(default: float) -> Any:
    """A seconds option that must be more than 0 (a period, not a limit)."""
    return attrs.field(
        default=default,
        converter=attrs.Converter(_to_seconds, takes_field=True),
        validator=_check_positive,
    )


#: How the history window is kept when it is full (see :class:`RunOptions`).
HISTORY_MODES = ("blocks", "sliding")


def _check_history(_options: RunOptions, _field: attrs.Attribute[str], value: object) -> None:
    if value not in HISTORY_MODES:
        raise ConfigurationError(f"history must be 'blocks' or 'sliding', got {value!r}")


def _check_summary_model(_options: RunOptions, _field: attrs.Attribute[Any], value: object) -> None:
    if value is None or isinstance(value, Model):
        return
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"history_summary_model must be a litellm model string, a Model or None, got {value!r}"
        )


#: The default clock; it keeps no state, so every run shares one.
_SYSTEM_CLOCK = SystemClock()


@attrs.frozen(kw_only=True)
class RunOptions:
    """Every option of a run, validated; built from the entry points' keyword arguments.

    Each field checks (and where needed converts) itself: seconds become floats, outcomes a
    tuple; a bad value raises :class:`ConfigurationError` naming the option.

    History: the model is sent at most ``history_turns`` turns (0 = every turn), the newest
    turn always among them. With ``history="blocks"`` (the default) a full window is cut at
    once down to its ``history_keep_turns`` newest turns (0 = a quarter of ``history_turns``,
    rounded up), so that everything before the newest turn is sent unchanged, and a
    provider's prompt cache holds, for the next ``history_turns - history_keep_turns`` turns;
    ``history="sliding"`` drops the oldest turn at every turn once the window is full. Which
    turns are kept follows from the turn number alone (:func:`window_start`), so a resumed run
    sends the window its live run would have. Once the first turn is cut, the goal is sent in
    a message of its own after the system prompt. ``history_summary_model`` (a litellm model
    string or a :class:`Model`, a cheap one) writes a summary of each cut block, folded into
    the one before, sent after the goal; its calls count in the totals and budgets.

    ``agent_version`` names what defines the agent (a spec file's digest, a release): every
    checkpoint records it, so a worker resuming the session can tell whether it runs the same.
    """

    max_turns: int = _count(50)
    max_input_tokens: int = _count(0)
    max_output_tokens: int = _count(0)
    max_cost_usd: float = attrs.field(default=0.0, converter=_to_money)
    max_wallclock: float = _seconds(0.0)
    per_turn_timeout: float = _seconds(0.0)
    continuation_prompt: str = attrs.field(default="continue", validator=_check_prompt)
    done_tool_name: str = attrs.field(default="report_done", validator=_check_tool_name)
    done_tool_description: str | None = None
    before_turn: BeforeTurn | None = attrs.field(default=None, validator=_check_callable)
    progress: ProgressCallback | None = attrs.field(default=None, validator=_check_callable)
    retry_policy: RetryPolicy | None = attrs.field(
        default=None, converter=_to_policy, validator=_check_callable
    )
    scheduler: Scheduler | None = attrs.field(default=None, validator=_check_scheduler)
    schedule_tool_name: str = attrs.field(default="schedule_next_turn", validator=_check_tool_name)
    schedule_tool_description: str | None = None
    schedule_tool_max_defer: float = _seconds(0.0)
    max_defer: float = _seconds(0.0)
    permissions_gate: Gate | None = None
    pricing: Pricing | None = None
    tracker: Tracker | None = None
    max_model_calls_per_turn: int = _count(25, minimum=1)
    tool_timeout: float = _seconds(300.0)
    max_tool_result_chars: int = _count(8000, minimum=1)
    outcomes: tuple[str, ...] = attrs.field(
        default=(), converter=_to_outcomes, validator=_check_outcomes
    )
    result_schema: dict[str, Any] | None = None
    history_turns: int = _count(50)
    history: str = attrs.field(default="blocks", validator=_check_history)
    history_keep_turns: int = _count(0)
    history_summary_model: str | Model | None = attrs.field(
        default=None, validator=_check_summary_model
    )
    clock: Clock = _SYSTEM_CLOCK
    lease_ttl: float = _positive_seconds(30.0)
    control_poll: float = _positive_seconds(0.5)
    supervisor: SupervisorFunction | None = attrs.field(default=None, validator=_check_callable)
    supervisor_timeout: float = _seconds(30.0)
    pause_max: float = _seconds(0.0)
    telemetry: Telemetry | None = None
    agent_version: str = attrs.field(default="", validator=attrs.validators.instance_of(str))

    def __attrs_post_init__(self) -> None:
        # The checks that involve two options; each option has checked itself by now.
        if self.done_tool_name == self.schedule_tool_name:
            raise ConfigurationError(
                f"done_tool_name and schedule_tool_name are both {self.done_tool_name!r}"
            )
        if self.result_schema is not None and not self.outcomes:
            raise ConfigurationError("result_schema needs an outcome set (outcomes=...)")
        self._check_history_window()

    def _check_history_window(self) -> None:
        window, keep = self.history_turns, self.history_keep_turns
        if keep and self.history == "sliding":
            raise ConfigurationError("history_keep_turns applies to history='blocks' only")
        if keep and window and keep > window:
            raise ConfigurationError(
                f"history_keep_turns={keep} must not be more than history_turns={window}"
            )
        if keep and not window:
            raise ConfigurationError("history_keep_turns needs a window (history_turns > 0)")
        if self.history_summary_model is not None and not window:
            raise ConfigurationError(
                "history_summary_model needs a window (history_turns > 0): with every turn "
                "kept there is nothing to summarise"
            )

    @property
    def history_keep(self) -> int:
        """The turns a full window is cut down to (``history_turns`` when sliding: one turn
        at a time; 0 when every turn is kept)."""
        window = self.history_turns
        if not window or self.history == "sliding":
            return window
        return self.history_keep_turns or max(1, math.ceil(window / 4))


class RunKwargs(TypedDict, total=False):
    """The keyword options of ``run_autonomous``, ``start_autonomous`` and ``resume_autonomous``.

    One key per field of :class:`RunOptions`, typed as the entry points take it (seconds as a
    number or a ``timedelta``, outcomes as any iterable of strings). For callers that pass
    options along: ``def run(goal: str, **options: Unpack[RunKwargs])``.
    """

    max_turns: int
    max_input_tokens: int
    max_output_tokens: int
    max_cost_usd: float
    max_wallclock: Seconds
    per_turn_timeout: Seconds
    continuation_prompt: str
    done_tool_name: str
    done_tool_description: str | None
    before_turn: BeforeTurn | None
    progress: ProgressCallback | None
    retry_policy: RetryPolicy | RetryFunction | None
    scheduler: Scheduler | None
    schedule_tool_name: str
    schedule_tool_description: str | None
    schedule_tool_max_defer: Seconds
    max_defer: Seconds
    permissions_gate: Gate | None
    pricing: Pricing | None
    tracker: Tracker | None
    max_model_calls_per_turn: int
    tool_timeout: Seconds
    max_tool_result_chars: int
    outcomes: Iterable[str]
    result_schema: dict[str, Any] | None
    history_turns: int
    history: str
    history_keep_turns: int
    history_summary_model: str | Model | None
    clock: Clock
    lease_ttl: Seconds
    control_poll: Seconds
    supervisor: SupervisorFunction | None
    supervisor_timeout: Seconds
    pause_max: Seconds
    telemetry: Telemetry | None
    agent_version: str


_OPTION_NAMES = frozenset(a.name for a in attrs.fields(RunOptions))

#: The options that are a session's budgets (recorded in its log, see :class:`Budgets`).
BUDGET_NAMES = tuple(a.name for a in attrs.fields(Budgets))


def budgets_of(opts: RunOptions) -> Budgets:
    """The budgets ``opts`` run under, as the log records them."""
    return Budgets(**{name: getattr(opts, name) for name in BUDGET_NAMES})


def with_budgets(opts: RunOptions, budgets: Budgets) -> RunOptions:
    """``opts`` running under ``budgets``."""
    return attrs.evolve(opts, **attrs.asdict(budgets))


def make_options(kwargs: Mapping[str, Any]) -> RunOptions:
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

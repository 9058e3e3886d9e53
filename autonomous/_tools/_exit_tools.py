"""The run's exit tools: the done tool and the schedule tool; each call answers with its signal."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from scheduler import Clock, ScheduleEvent

from .._text import cleaned
from ._schema import JSON_TYPES
from ._tool_result import ToolOutcome
from ._tools import Tool


@attrs.frozen
class DoneSignal:
    """The model called the done tool."""

    detail: str = ""
    outcome: str | None = None
    result: Any = None


def done_description(outcomes: tuple[str, ...], schedule_name: str | None = None) -> str:
    """The default done tool description: what calling it does, in the code's terms.

    As in Go, the tool is also offered to an agent that cannot proceed any further, so that a
    stuck agent ends the run with its reason instead of burning the budget.
    """
    text = (
        "End the whole autonomous run: call this once the goal is fully achieved, or when you "
        "cannot proceed any further (blocked, missing access or information, nothing left you "
        "can do). After this turn no further turn starts"
    )
    if schedule_name is not None:
        text += (
            f" (even if you also called {schedule_name}; to check again later, call "
            f"{schedule_name} instead)"
        )
    text += (
        '. Arguments: state must be "done" (the only accepted value); detail is one sentence '
        "saying what was achieved, or why you cannot proceed."
    )
    if outcomes:
        text += (
            f" outcome is required and must be one of: {', '.join(outcomes)}; result carries "
            "the structured answer when one is asked for. A value outside the set is rejected."
        )
    return text + " The tool answers 'acknowledged' or 'rejected: <reason>'."


def schedule_description(
    max_defer: float, done_name: str = "report_done", name: str = "schedule_next_turn"
) -> str:
    """The default schedule tool description: when to use it rather than the done tool (which
    wins when both are called in a turn), and the cadence ladder."""
    cap = f" The furthest allowed wake is {int(max_defer)} seconds ahead." if max_defer else ""
    return (
        "Schedule the next turn for later instead of continuing now: use this when there is "
        f"more to do later (the next check of a monitor); when the goal is achieved, or you "
        f"cannot proceed any further, call {done_name} instead. If you call both {done_name} "
        f"and {name} in one turn, {done_name} wins and the run ends. The runtime finishes this "
        "turn, waits until the wake time (sleeping in this process, or exiting so that an "
        "orchestrator resumes the session then), and starts the next turn with next_prompt as "
        "its prompt. Give exactly one of wake_at (an RFC 3339 time, e.g. 2030-01-01T12:00:00Z; "
        "a time in the past wakes at once) or wake_in_sec (a positive whole number of seconds)."
        + cap
        + " Cadence: about 30 s for fast-changing state, 5-15 minutes for steady monitoring, "
        "1 hour or more for slow infrastructure. Write next_prompt so it stands alone (good: "
        "'Re-check disk usage on db-1 and alert if above 90%'; bad: 'continue'), and put any "
        "state you need later in next_prompt or detail. An inbox message may wake you early. "
        "The tool answers 'acknowledged' (with the current time) or 'rejected: <reason>'."
    )


def _done_parameters(
    outcomes: tuple[str, ...], result_schema: dict[str, Any] | None
) -> dict[str, Any]:
    props: dict[str, Any] = {
        "state": {"type": "string", "enum": ["done"], "description": 'Always "done".'},
        "detail": {"type": "string", "description": "One sentence: what was achieved."},
    }
    required = ["state"]
    if outcomes:
        props["outcome"] = {"type": "string", "enum": list(outcomes), "description": "The exit."}
        props["result"] = dict(result_schema) if result_schema else {"description": "The answer."}
        required.append("outcome")
    return {"type": "object", "properties": props, "required": required}


_SCHEDULE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "wake_at": {"type": "string", "description": "RFC 3339 wake time."},
        "wake_in_sec": {"type": "integer", "minimum": 1, "description": "Seconds from now."},
        "next_prompt": {"type": "string", "description": "The prompt of the next turn."},
        "detail": {"type": "string", "description": "Why, and any state to keep."},
    },
}


async def _never_called(**_: Any) -> str:  # pragma: no cover - the driver intercepts these tools
    return "rejected: this tool is handled by the runtime"


#: What a call of the run's own tools signals to the loop: the run is done, or sleeps.
Signal = DoneSignal | ScheduleEvent


@attrs.frozen
class ExitAnswer:
    """The answer to a call of the run's own tools: the text the model reads, its outcome
    (``OK`` or ``REJECTED``) and, when accepted, the signal it gives the loop."""

    content: str
    outcome: ToolOutcome
    signal: Signal | None = None


def _rejected(why: str) -> ExitAnswer:
    # A rejection may quote the model's own keys, which JSON escapes can make surrogates.
    return ExitAnswer(
        cleaned(f"rejected: {why}", "tool_result", "control_answer"), ToolOutcome.REJECTED
    )


def _accepted(text: str, signal: Signal) -> ExitAnswer:
    return ExitAnswer(f"acknowledged: {text}", ToolOutcome.OK, signal)


@attrs.frozen
class ExitTools:
    """The run's exit tools, the done tool and the schedule tool (not its controls, pause,
    resume and stop: :class:`~autonomous._control._control_requests.RunControls`): builds them
    and answers their calls; holds nothing between calls."""

    done_name: str
    schedule_name: str | None
    outcomes: tuple[str, ...]
    result_schema: dict[str, Any] | None
    schedule_max_defer: float
    clock: Clock
    done_text: str | None = None
    schedule_text: str | None = None

    def tools(self) -> list[Tool]:
        """The tools handed to ``build`` as ``extra_tools``."""
        made = [
            Tool(
                name=self.done_name,
                description=self.done_text or done_description(self.outcomes, self.schedule_name),
                parameters=_done_parameters(self.outcomes, self.result_schema),
                fn=_never_called,
            )
        ]
        if self.schedule_name is not None:
            text = self.schedule_text or schedule_description(
                self.schedule_max_defer, self.done_name, self.schedule_name
            )
            made.append(
                Tool(
                    name=self.schedule_name,
                    description=text,
                    parameters=_SCHEDULE_PARAMETERS,
                    fn=_never_called,
                )
            )
        return made

    def handles(self, name: str) -> bool:
        """True for the names of the run's own tools."""
        return name == self.done_name or (name is not None and name == self.schedule_name)

    def call(self, name: str, raw: str, turn: int) -> ExitAnswer:
        """Answer a call of the run's own tools: an acknowledgement with its signal, or
        ``rejected: ...`` without one."""
        try:
            args = json.loads(raw) if raw.strip() else {}
        except RecursionError:
            return _rejected("arguments are nested too deeply (past the JSON parser's limit)")
        except ValueError:
            return _rejected("arguments are not valid JSON")
        if not isinstance(args, dict):
            return _rejected("arguments must be a JSON object")
        if name == self.done_name:
            return self._done(args)
        return self._schedule(args, turn)

    def _done(self, args: dict[str, Any]) -> ExitAnswer:
        unknown = sorted(set(args) - {"state", "detail", "outcome", "result"})
        if unknown:
            return _rejected(f"unknown argument(s) {', '.join(unknown)}")
        if args.get("state") != "done":
            return _rejected('state must be "done"; call this tool only when the goal is achieved')
        detail = args.get("detail", "")
        if not isinstance(detail, str):
            return _rejected("detail must be a string")
        outcome = args.get("outcome")
        result = args.get("result")
        if self.outcomes:
            if outcome not in self.outcomes:
                return _rejected(
                    f"outcome must be one of {', '.join(self.outcomes)}; got {outcome!r}"
                )
            problem = _check_type(result, self.result_schema)
            if problem:
                return _rejected(f"result {problem}")
        elif outcome is not None or result is not None:
            return _rejected("this run declares no outcome set; pass only state and detail")
        return _accepted(
            "the run ends after this turn. Reply with a short final summary and call no more "
            "tools.",
            DoneSignal(detail=detail, outcome=outcome, result=result),
        )

    def _schedule(self, args: dict[str, Any], turn: int) -> ExitAnswer:
        unknown = sorted(set(args) - {"wake_at", "wake_in_sec", "next_prompt", "detail"})
        if unknown:
            return _rejected(f"unknown argument(s) {', '.join(unknown)}")
        has_at, has_in = args.get("wake_at") is not None, args.get("wake_in_sec") is not None
        if has_at == has_in:
            return _rejected("give exactly one of wake_at or wake_in_sec")
        now = self.clock.now()
        late = ""
        if has_in:
            secs = args["wake_in_sec"]
            if isinstance(secs, bool) or not isinstance(secs, int | float) or secs != int(secs):
                return _rejected("wake_in_sec must be a whole number of seconds")
            if secs <= 0:
                return _rejected("wake_in_sec must be positive")
            wake_at = now + timedelta(seconds=int(secs))
        else:
            wake = _parse_rfc3339(args["wake_at"])
            if wake is None:
                return _rejected("wake_at must be an RFC 3339 time with a timezone")
            if wake <= now:  # as in Go: wake at once, and tell the model what time it is
                late = f"wake_at {_rfc3339(wake)} is in the past; waking now"
            wake_at = max(wake, now)
        delay = (wake_at - now).total_seconds()
        if self.schedule_max_defer and delay > self.schedule_max_defer:
            return _rejected(
                f"the wake is {int(delay)} s ahead, past the maximum of "
                f"{int(self.schedule_max_defer)} s; choose an earlier time"
            )
        prompt, detail = args.get("next_prompt", ""), args.get("detail", "")
        if not isinstance(prompt, str) or not isinstance(detail, str):
            return _rejected("next_prompt and detail must be strings")
        # The current time goes in every answer: models get clocks wrong.
        when = late or f"next turn at {_rfc3339(wake_at)} (in {int(delay)} s)"
        return _accepted(
            f"{when} (current time {_rfc3339(now)}); end this turn now",
            ScheduleEvent(wake_at=wake_at, next_prompt=prompt, detail=detail, turn=turn),
        )


def _rfc3339(moment: datetime) -> str:
    """``moment`` in UTC as RFC 3339 with a ``Z`` (fractions of a second kept only if any)."""
    text = moment.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z"


def _parse_rfc3339(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _check_type(value: Any, schema: dict[str, Any] | None) -> str | None:
    """Why ``value`` (parsed JSON) is not of the schema's top-level ``type``, or None."""
    if not schema or "type" not in schema:
        return None
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    kind = JSON_TYPES.get(type(value))
    if kind in types or (kind == "integer" and "number" in types):
        return None
    return f"must be of JSON type {' or '.join(types)}"

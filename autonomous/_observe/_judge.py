"""The LLM judge: a supervisor that asks a (cheap) model how the run is going, every N turns."""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from usage import Usage

from .._errors import ConfigurationError
from .._logging import get_logger
from .._model import Message, Model
from .._models._litellm import LiteLLMModel
from .._progress import ProgressEvent
from ._supervisor import (
    AbortRun,
    PauseRun,
    Proceed,
    Steer,
    SupervisorDecision,
    SupervisorSnapshot,
)

__all__ = ["LLMJudge", "parse_verdict", "snapshot_json"]

_log = get_logger("autonomous.supervisor")

#: The longest steer message or reason kept from a judge's answer.
_MAX_JUDGE_TEXT = 2000

_JUDGE_PROMPT = """\
You supervise an autonomous AI agent that works toward a goal in turns, under hard budgets.
At each check you get a JSON snapshot of its run: the upcoming turn number, tokens and dollars \
spent, seconds elapsed, budgets left (null = uncapped), error streaks, and its most recent \
progress events (event types with counts, tool names and outcomes). You never see the agent's \
prompts, tool arguments or results, and you cannot change its tools or its task.
Decide whether the run should go on. Answer with exactly one JSON object and nothing else:
{"decision": "continue"}  the run looks healthy (the usual answer);
{"decision": "steer", "message": "..."}  one or two sentences of guidance for the agent, \
for example to stop repeating a failing tool;
{"decision": "pause", "reason": "..."}  a human should look before it spends more;
{"decision": "abort", "reason": "..."}  it is stuck or wasting its budget and must stop now.
Prefer continue; steer before you pause, and pause before you abort."""

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def _event_json(event: ProgressEvent) -> dict[str, Any]:
    return {"type": type(event).__name__, **attrs.asdict(event)}


def snapshot_json(snapshot: SupervisorSnapshot) -> str:
    """``snapshot`` as compact JSON: numbers, names and event types, never content."""
    data = attrs.asdict(snapshot, recurse=True, filter=lambda a, _: a.name != "recent_events")
    data["cost_usd"] = round(snapshot.cost_usd, 6)
    data["elapsed"] = round(snapshot.elapsed, 1)
    data["recent_events"] = [_event_json(event) for event in snapshot.recent_events]
    return json.dumps(data, separators=(",", ":"))


def _clip(value: Any) -> str:
    return str(value).strip()[:_MAX_JUDGE_TEXT] if value is not None else ""


def parse_verdict(text: str) -> SupervisorDecision | None:
    """A judge's JSON answer as a decision (code fences and prose around it are tolerated).

    ``None`` when the answer is not such an object, names no known decision, or is a steer
    without a message.
    """
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(body[start : end + 1])
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kind = str(data.get("decision", "")).strip().lower()
    message, reason = _clip(data.get("message")), _clip(data.get("reason"))
    if kind in ("continue", "proceed"):
        return Proceed()
    if kind == "steer":
        return Steer(message) if message else None
    if kind == "pause":
        return PauseRun(reason or message)
    if kind == "abort":
        return AbortRun(reason or message or "aborted by the LLM judge")
    return None


class LLMJudge:
    """A supervisor that asks a model every ``every_n_turns`` turns how the run is going.

    ``model`` is a litellm model string (``completion_kwargs`` go to ``litellm.acompletion``)
    or any :class:`~autonomous._model.Model`, such as ``ScriptedModel``. The model gets a
    system prompt explaining its role (plus ``instructions``, when given) and the snapshot as
    compact, content-free JSON; it answers ``{"decision": "continue"|"steer"|"pause"|"abort",
    "message": ..., "reason": ...}``. An answer that does not parse is :class:`Proceed`
    (logged). A failing model call raises, and :func:`consult` fails open on it.

    The judge is asked once ``turns_done`` has grown by ``every_n_turns`` since its last
    question (the first time at ``turns_done >= every_n_turns``); between those it returns
    :class:`Proceed` without a model call. Its own spending is in ``calls``,
    ``input_tokens``, ``output_tokens`` and ``last_usage``. One instance per run.
    """

    def __init__(
        self,
        model: Model | str,
        *,
        every_n_turns: int = 5,
        instructions: str | None = None,
        **completion_kwargs: Any,
    ) -> None:
        if isinstance(model, str):
            model = LiteLLMModel(model, **completion_kwargs)
        elif completion_kwargs:
            raise ConfigurationError(
                "completion keywords apply to a litellm model string only, not to a Model object"
            )
        if isinstance(every_n_turns, bool) or every_n_turns < 1:
            raise ConfigurationError(f"every_n_turns must be >= 1, got {every_n_turns!r}")
        self.model: Model = model
        self.every_n_turns = every_n_turns
        self.instructions = instructions
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.last_usage: Usage | None = None
        self._last_asked = 0

    def due(self, snapshot: SupervisorSnapshot) -> bool:
        """True when this boundary is one where the model is asked."""
        return snapshot.turns_done - self._last_asked >= self.every_n_turns

    def messages(self, snapshot: SupervisorSnapshot) -> list[Message]:
        """The conversation sent to the model for ``snapshot``."""
        system = _JUDGE_PROMPT
        if self.instructions and self.instructions.strip():
            system += "\n\nYour operator's instructions:\n" + self.instructions.strip()
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": "Run snapshot: " + snapshot_json(snapshot)},
        ]

    async def __call__(self, snapshot: SupervisorSnapshot, /) -> SupervisorDecision:
        """The model's verdict when due, else :class:`Proceed` without asking."""
        if not self.due(snapshot):
            return Proceed()
        self._last_asked = snapshot.turns_done  # a failing model is asked again N turns later
        self.calls += 1
        response = await self.model.complete(self.messages(snapshot), ())
        self.last_usage = response.usage
        self.input_tokens += response.usage.input_tokens
        self.output_tokens += response.usage.output_tokens
        decision = parse_verdict(response.text)
        if decision is None:
            _log.warning(
                "supervisor_judge_unparsable", turn=snapshot.turn, chars=len(response.text)
            )
            return Proceed()
        return decision

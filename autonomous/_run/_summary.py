"""Summaries of the turns a history window cuts, written by a cheap model and folded into one.

With ``history_summary_model`` set, each block the window cuts is summarised before it goes:
the summary model gets the goal, the summary so far and the cut turns, and writes one summary
of everything cut up to now (folded, not accumulated: the message stays short however long the
run). The summary is a :class:`eventlog.HistorySummary` event, committed at once, and is sent
after the goal until the next cut. Its tokens and cost count in the run's totals (and so in its
budgets) and in the tracker. A failed call never fails the run: the block is cut without a new
summary (the one before stays) and ``history_summary_failed`` is logged; so it is when the call
outlives ``per_turn_timeout`` (on the run's clock), which bounds it as it bounds a turn. A call
that could pass ``max_input_tokens`` or ``max_cost_usd`` (estimated as the loop estimates its own
calls) is not made: the block is cut without one and ``history_summary_skipped`` is logged. The
call is a ``chat`` span in the turn about to start, its tokens and cost in the telemetry's metrics.
"""

from __future__ import annotations

import contextlib
import json

import anyio
import attrs

from eventlog import HistorySummary
from usage import Pricing, Tracker, Usage

from .._errors import TurnTimeout
from .._model import Message, Model, ModelResponse
from .._models import LiteLLMModel, model_for, output_limit
from .._observe._observer import Observer
from .._options import RunOptions
from .._progress import HistorySummarized, ModelCalling
from .._state._conversation import Conversation
from .._state._history import DroppedBlock
from .._state._run_state import Meter
from ._decide import call_would_pass, estimate_input_tokens, prompt_chars

#: What the summary model is told to do.
SUMMARY_INSTRUCTIONS = (
    "You keep the memory of an autonomous agent whose oldest turns are being removed from its "
    "context. Write one summary of everything the agent must still know from them: facts "
    "found, decisions taken, what was done, open items and numbers that matter. Fold the "
    "previous summary in. Be brief: at most 150 words, plain text, no preamble."
)
#: The most characters of one message shown to the summary model.
_MESSAGE_CHARS = 2000
#: The output a summary may take when its model's limit is not known (150 words and margin).
_OUTPUT_RESERVE = 1024


@attrs.frozen
class Summarizer:
    """The summary model of a run and its prices."""

    model: Model
    pricing: Pricing

    def most_cost(self, request: list[Message]) -> tuple[int, float]:
        """The estimated input tokens of ``request`` and the most its call may cost."""
        tokens = estimate_input_tokens(prompt_chars(request, []), 0, 0)
        if self.pricing.is_zero:
            return tokens, 0.0
        reserve = output_limit(self.model) or _OUTPUT_RESERVE
        return tokens, self.pricing.uncached_cost(tokens, reserve)

    def summary_of(
        self,
        response: ModelResponse,
        previous: HistorySummary | None,
        block: DroppedBlock,
        turn: int,
    ) -> HistorySummary:
        """The summary of ``previous`` and ``block`` the model answered with ``response``,
        written at the start of ``turn``; raises when it gives no text."""
        text = response.text.strip()
        if not text:
            raise ValueError("the summary model answered with no text")
        u = response.usage
        return HistorySummary(
            text=text,
            first_turn=previous.first_turn if previous is not None else block.first_turn,
            last_turn=block.last_turn,
            turn=turn,
            model=response.model or self.model.name,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cached_input_tokens=u.cached_input_tokens,
            cost_usd=self.pricing.cost(u) if not self.pricing.is_zero else 0.0,
        )


def summary_request(
    goal: str, previous: HistorySummary | None, block: DroppedBlock
) -> list[Message]:
    """The messages sent to the summary model for ``block``."""
    parts = [f"Goal of the run: {goal}"]
    if previous is not None:
        parts.append(
            f"Summary so far (turns {previous.first_turn}-{previous.last_turn}):\n{previous.text}"
        )
    parts.append(f"Turns {block.first_turn}-{block.last_turn}, being removed now:")
    parts += [_line(m) for m in block.messages]
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": "\n".join(parts)},
    ]


def _line(message: Message) -> str:
    """One message of a transcript, cut to :data:`_MESSAGE_CHARS`."""
    role = message.get("role", "?")
    text = message.get("content") or ""
    if not isinstance(text, str):
        text = json.dumps(text)
    calls = [
        f"{c['function']['name']}({c['function']['arguments']})"
        for c in message.get("tool_calls") or ()
    ]
    if calls:
        text = f"{text} [calls {', '.join(calls)}]".strip()
    return f"{role}: {text[:_MESSAGE_CHARS]}"


async def summarizer_for(model: str | Model | None) -> Summarizer | None:
    """The run's summarizer for ``history_summary_model`` (None: no summaries); a litellm
    model is priced from litellm's table (unlisted: unpriced)."""
    if model is None:
        return None
    if isinstance(model, str):
        model = model_for(model)
    pricing = Pricing()
    if isinstance(model, LiteLLMModel):
        with contextlib.suppress(LookupError):  # unlisted: unpriced
            # In a thread: the first use imports litellm (seconds), the loop must go on.
            pricing = await anyio.to_thread.run_sync(Pricing.for_model, model.name)
    return Summarizer(model, pricing)


async def compactor_for(opts: RunOptions, meter: Meter, observer: Observer) -> Compactor | None:
    """The run's compactor (None without ``history_summary_model``)."""
    summarizer = await summarizer_for(opts.history_summary_model)
    if summarizer is None:
        return None
    return Compactor(summarizer, meter, opts, observer)


@attrs.frozen
class Compactor:
    """Summarises what the window cuts before a turn, counting the call in the run's meter."""

    summarizer: Summarizer
    meter: Meter
    opts: RunOptions
    observer: Observer

    async def before_turn(self, conv: Conversation, turn: int) -> None:
        """Summarise the turns that starting ``turn`` cuts, if any are not summarised yet."""
        history = conv.history
        block = history.dropped_by(turn)
        previous = history.summary
        if block is None or (previous is not None and block.last_turn <= previous.last_turn):
            return
        request = summary_request(history.goal, previous, block)
        tokens, most = self.summarizer.most_cost(request)
        cap = call_would_pass(self.opts, self.meter.spent, input_tokens=tokens, most_cost_usd=most)
        log = self.observer.log
        if cap is not None:  # the block goes without a summary; the turn's own check decides
            log.warning("history_summary_skipped", turn=turn, budget=str(cap))
            return
        try:
            summary = await self._ask(request, previous, block, turn)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # the block goes without a summary; the run goes on
            log.warning("history_summary_failed", turn=turn, error=type(exc).__name__)
            return
        self._count(summary)
        conv.record(summary)  # sent after the goal from now on
        await conv.flush()  # durable now: a resume sends this summary, never writes another
        await self.observer.emit(
            HistorySummarized(
                turn,
                summary.model,
                summary.first_turn,
                summary.last_turn,
                summary.input_tokens,
                summary.output_tokens,
                summary.cost_usd,
            )
        )

    async def _ask(
        self,
        request: list[Message],
        previous: HistorySummary | None,
        block: DroppedBlock,
        turn: int,
    ) -> HistorySummary:
        """The summary model's summary, its call a span of ``turn``; raises when the call
        fails, gives no text or outlives ``per_turn_timeout``."""
        model, limit = self.summarizer.model, self.opts.per_turn_timeout
        await self.observer.emit(ModelCalling(turn, model.name))
        with self.observer.model_span(turn, model, request) as span:
            with self.opts.clock.move_on_after(limit or None):
                response = await model.complete(request, [])
                summary = self.summarizer.summary_of(response, previous, block, turn)
                self.observer.model_usage(span, response, summary.cost_usd)
                return summary
            raise TurnTimeout(f"the summary call ran past per_turn_timeout={limit:g} s")

    def _count(self, s: HistorySummary) -> None:
        self.meter.spent = self.meter.spent.add_call(
            s.input_tokens, s.output_tokens, s.cost_usd, s.cached_input_tokens
        )
        tracker: Tracker | None = self.opts.tracker
        if tracker is not None:
            usage = Usage(s.input_tokens, s.output_tokens, s.cached_input_tokens)
            tracker.record(s.model, usage, s.cost_usd)

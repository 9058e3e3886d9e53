"""One turn: model call, the tool calls it asks for in order, next model call, until an answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import attrs

from eventlog import EventLogError, PermissionDecision
from permissions import Caller, Decision, Gate
from scheduler import ScheduleEvent
from usage import Pricing, Tracker

from .._callers import to_originator
from .._errors import ModelCallLimit, ModelError, ToolTimeoutError, TurnError, TurnTimeout
from .._model import Message, Model, ModelResponse, ToolCall
from .._models import output_limit
from .._models._litellm import LiteLLMModel
from .._observe._observer import Observer
from .._options import RunOptions
from .._progress import ModelCalled, ModelCalling, ToolCalled, ToolCalling
from .._result import StopReason
from .._state._conversation import Conversation
from .._state._history import INTERRUPTED
from .._state._run_state import Meter
from .._tools._exit_tools import DoneSignal, ExitTools
from .._tools._tool_result import ToolInterrupted, ToolOutcome, format_error, render_result
from .._tools._tools import (
    Tool,
    ToolArgumentError,
    ToolCallContext,
    parse_arguments,
    tool_call_context,
)
from ._decide import (
    Spending,
    TurnOutcome,
    call_budget,
    call_would_pass,
    estimate_input_tokens,
    prompt_chars,
)
from ._tool_table import ToolTable


@attrs.define
class _Signals:
    """What an attempt has done so far; it outlives a failure in the middle of the attempt
    (a done signal given before a tool timed out still ends the run)."""

    text: str = ""
    spent: Spending = attrs.field(factory=Spending)
    done: DoneSignal | None = None
    schedule: ScheduleEvent | None = None

    def outcome(
        self, *, error: BaseException | None = None, cap: StopReason | None = None
    ) -> TurnOutcome:
        return TurnOutcome(self.text, self.spent, self.done, self.schedule, error, cap)


@attrs.frozen
class _Answer:
    """What a tool call is answered with, its outcome (ok, error, timeout, denied, rejected),
    and the error that fails the turn instead (a ``fatal_timeout`` tool timed out)."""

    content: str
    outcome: ToolOutcome
    fatal: TurnError | None = None


@attrs.define
class TurnRunner:
    """Runs the body of turns for one run; owns nothing but references to the run's parts."""

    model: Model
    tools: dict[str, Tool]
    specs: list[dict[str, Any]]
    exit_tools: ExitTools
    conv: Conversation
    opts: RunOptions
    pricing: Pricing
    tracker: Tracker | None
    gate: Gate | None
    meter: Meter
    elapsed: Callable[[], float]
    observer: Observer = attrs.field(factory=Observer)
    #: Where ``tools`` and ``specs`` come from when MCP servers add to them: read again
    #: before each model call, so a changed list is what the next call offers.
    tool_table: ToolTable | None = None
    #: Calls of a resumed turn that a crash may have cut short: answered as interrupted
    #: unless their tool is idempotent (then run again).
    _interrupted: set[str] = attrs.field(factory=set, init=False)
    _resumed: tuple[ToolCall, ...] = attrs.field(default=(), init=False)
    _key_turn: int = attrs.field(default=-1, init=False)  # the turn _key_index counts for
    _key_index: int = attrs.field(default=0, init=False)  # the index of its next tool call
    _prompt_chars: int = attrs.field(default=0, init=False)  # of the call about to be made
    _max_output: int | None = attrs.field(default=None, init=False)  # litellm's, looked up once

    async def run(self, turn: int, caller: Caller | None) -> TurnOutcome:
        """Run an attempt of a turn whose prompt is already in the conversation; what it did.

        A failure (a :class:`TurnError`, a tool's or the model's exception, the turn's
        ``per_turn_timeout``) is the outcome's ``error``; a log that cannot record the run
        is raised. Each tool call has a cancel scope of its own for its timeout (see
        :meth:`_dispatch`).
        """
        got = _Signals()
        limit = self.opts.per_turn_timeout
        try:
            with self.opts.clock.move_on_after(limit or None) as scope:
                cap = await self._attempt(turn, caller, got)
        except EventLogError:
            raise  # the log cannot record the run: not a turn error, the run fails
        except Exception as exc:
            return got.outcome(error=exc)
        if scope.cancelled_caught:
            timeout = TurnTimeout(f"turn {turn} ran past per_turn_timeout={limit:g} s")
            return got.outcome(error=timeout)
        return got.outcome(cap=cap)

    async def _attempt(self, turn: int, caller: Caller | None, got: _Signals) -> StopReason | None:
        """Call the model and run the tools it asks for until it answers without any; the
        cap that stopped it between two calls, if one did."""
        calls = 0
        pending, self._resumed = self._resumed, ()  # a resumed turn answers its open calls first
        while True:
            await self._run_tools(pending, turn, caller, got)
            reason = self._check_budgets(calls)
            if reason is not None:
                return reason
            if self.tool_table is not None and await self.tool_table.refresh():
                self._take_tools(self.tool_table.tools())
            reason = self.refused_call()
            if reason is not None:
                return reason
            response = await self._call_model(turn, got)
            calls += 1
            if response.text:
                got.text = self.meter.final_text = response.text
            if not response.tool_calls:
                return None
            pending = response.tool_calls

    def _take_tools(self, tools: tuple[Tool, ...]) -> None:
        """Offer ``tools`` from the next model call on."""
        self.tools = {t.name: t for t in tools}
        self.specs = [t.spec() for t in tools]

    async def _run_tools(
        self, calls: tuple[ToolCall, ...], turn: int, caller: Caller | None, got: _Signals
    ) -> None:
        """Run ``calls`` one after another, in order; a stop asked for during one of them
        ends the turn before the next starts."""
        for index, call in enumerate(calls):
            if index:
                await anyio.lowlevel.checkpoint_if_cancelled()
            await self._dispatch(call, turn, caller, got)

    async def _call_model(self, turn: int, got: _Signals) -> ModelResponse:
        """One model call on the conversation so far: counted, recorded and reported."""
        await self.observer.emit(ModelCalling(turn, self.model.name))
        messages = self.conv.messages
        with self.observer.model_span(turn, self.model, messages) as span:
            try:
                response = await self.model.complete(messages, self.specs)
            except TurnError:
                raise
            except Exception as exc:
                name = self.model.name
                raise ModelError(f"model call to {name} failed: {exc}") from exc
            cost = self._spent(response, got)
            self.observer.model_usage(span, response, cost)
        await self._answered(response, turn, cost)
        return response

    def resume_with(self, turn: int, calls: tuple[ToolCall, ...], first_index: int) -> None:
        """Make the next :meth:`run` go on with resumed turn ``turn``: answer ``calls`` (the
        open calls of its last answer, the first of them the turn's call ``first_index``)
        first, then call the model as usual."""
        self._resumed = calls
        self._interrupted = {c.id for c in calls}
        self.start_call_index(turn, first_index)

    async def _answer_interrupted(self, call: ToolCall, turn: int) -> bool:
        """Answer a call a crash cut short, unless its tool may safely run again; whether
        it was answered here."""
        self._interrupted.discard(call.id)
        tool = self.tools.get(call.name)
        rerun = tool is not None and tool.idempotent
        if self.exit_tools.handles(call.name) or rerun:
            return False
        self.conv.add_tool_result(call.id, call.name, INTERRUPTED, ToolOutcome.INTERRUPTED, turn)
        await self.observer.emit(ToolCalled(turn, call.name, ToolOutcome.INTERRUPTED))
        return True

    def _check_budgets(self, calls: int) -> StopReason | None:
        """The budget that forbids the next model call; raise if ``max_model_calls_per_turn``
        does (a turn error)."""
        reason = call_budget(self.opts, self.meter.spent, self.elapsed())
        if reason is not None:
            return reason
        if calls == self.opts.max_model_calls_per_turn:
            raise ModelCallLimit(
                f"the model asked for tools in {calls} calls in one turn "
                f"(max_model_calls_per_turn={calls})"
            )
        return None

    def refused_call(self, *new: Message) -> StopReason | None:
        """The cap the next model call, on the conversation plus ``new`` messages, would pass:
        its input estimated from the last call's, its most cost with all input uncached and
        the output reserve (:meth:`_output_reserve`) as output. None when no cap is on."""
        opts, priced = self.opts, not self.pricing.is_zero
        if not opts.max_input_tokens and not (opts.max_cost_usd and priced):
            return None  # measuring the prompt costs a serialisation: only for a cap
        self._prompt_chars = prompt_chars([*self.conv.messages, *new], self.specs)
        meter = self.meter
        tokens = estimate_input_tokens(
            self._prompt_chars, meter.last_prompt_chars, meter.last_input_tokens
        )
        most = self.pricing.uncached_cost(tokens, self._output_reserve()) if priced else 0.0
        return call_would_pass(opts, meter.spent, input_tokens=tokens, most_cost_usd=most)

    def _output_reserve(self) -> int:
        """The output a call may produce: a litellm model's ``max_tokens`` keyword, else its
        limit in litellm's table, else the most output a call of this run has produced."""
        kwargs = self.model.completion_kwargs if isinstance(self.model, LiteLLMModel) else {}
        for key in ("max_tokens", "max_completion_tokens"):
            value = kwargs.get(key)
            if isinstance(value, int) and value > 0:
                return value
        if self._max_output is None:
            self._max_output = output_limit(self.model) or 0
        return self._max_output or self.meter.most_output_tokens

    def _spent(self, response: ModelResponse, got: _Signals) -> float:
        """Count a model call's usage (the run's meter, the attempt's, the tracker); its cost."""
        u = response.usage
        cost = self.pricing.cost(u) if not self.pricing.is_zero else 0.0
        call = Spending.of_call(u, cost)
        self.meter.spent += call
        got.spent += call
        if self._prompt_chars:  # measured by the budget check before this call
            self.meter.last_prompt_chars, self._prompt_chars = self._prompt_chars, 0
            self.meter.last_input_tokens = u.input_tokens
        self.meter.most_output_tokens = max(self.meter.most_output_tokens, u.output_tokens)
        if self.tracker is not None:
            self.tracker.record(response.model or self.model.name, u, cost)
        return cost

    async def _answered(self, response: ModelResponse, turn: int, cost: float) -> None:
        """Record the answer: in the conversation, then in the log with what came before it
        (one append per model call, before any of its tools runs); report it.

        The turn's last answer (no tool calls) goes in with the checkpoint after the turn,
        one commit for both, whoever listens; listeners hear of it once that is written (the
        commit rule: :mod:`autonomous._observe._observer`).
        """
        conv = self.conv
        conv.add_answer(response, turn, cost)
        if response.tool_calls:
            await conv.flush()
        else:
            self.observer.hold()
        u = response.usage
        model = response.model or self.model.name
        calls = len(response.tool_calls)
        await self.observer.emit(
            ModelCalled(turn, model, u.input_tokens, u.output_tokens, cost, calls)
        )

    def start_call_index(self, turn: int, index: int) -> None:
        """Make ``index`` the index of the next tool call of ``turn`` (a resumed turn goes on
        after the calls it already made, so that no two of its calls share a key)."""
        self._key_turn, self._key_index = turn, index

    def _call_context(self, call: ToolCall, turn: int) -> ToolCallContext:
        """The next call's context: its index counts every tool call of ``turn`` dispatched by
        this runner, across the turn's model calls (and its retried attempts), from 0."""
        if turn != self._key_turn:
            self.start_call_index(turn, 0)
        index = self._key_index
        self._key_index += 1
        return ToolCallContext(str(self.conv.key), turn, index, call.id)

    async def _dispatch(
        self, call: ToolCall, turn: int, caller: Caller | None, got: _Signals
    ) -> None:
        """Run one tool call, report it and answer it in the conversation.

        A tool that timed out with ``fatal_timeout`` fails the turn with
        :class:`ToolTimeoutError` instead of being answered.
        """
        context = self._call_context(call, turn)
        if call.id in self._interrupted and await self._answer_interrupted(call, turn):
            return
        await self.observer.emit(ToolCalling(turn, call.name))
        with self.observer.tool_span(turn, call) as span:
            answer = await self._answer(call, context, turn, caller, got)
            self.observer.tool_outcome(span, call.name, answer.outcome, answer.content)
        await self.observer.emit(ToolCalled(turn, call.name, answer.outcome))
        if answer.fatal is not None:
            raise answer.fatal
        self.conv.add_tool_result(call.id, call.name, answer.content, answer.outcome, turn)

    async def _answer(
        self,
        call: ToolCall,
        context: ToolCallContext,
        turn: int,
        caller: Caller | None,
        got: _Signals,
    ) -> _Answer:
        """The answer to ``call``: from the exit tools (their signal kept in ``got``), a
        refusal (an unknown tool, arguments that do not fit, the gate) or the tool itself."""
        if self.exit_tools.handles(call.name):
            answer = self.exit_tools.call(call.name, call.arguments, turn)
            if isinstance(answer.signal, DoneSignal):
                got.done = answer.signal
            elif answer.signal is not None:
                got.schedule = answer.signal
            return _Answer(answer.content, answer.outcome)
        resolved = self._resolve(call)
        if isinstance(resolved, str):
            return _Answer(resolved, ToolOutcome.REJECTED)
        if self.gate is not None:
            decision = await self._ask_gate(*resolved, turn, caller)
            if not decision.allowed:
                # The gate's reasons are its own words, some of which say "denied: " already.
                reason = decision.reason.removeprefix("denied: ")
                return _Answer(f"denied: {reason}", ToolOutcome.DENIED)
        return await self._invoke(*resolved, context)

    async def _invoke(self, tool: Tool, args: dict[str, Any], context: ToolCallContext) -> _Answer:
        """Run ``tool`` (awaited right here) in a cancel scope of its own, with the tool's
        timeout (0: none): a timeout ends this call and nothing else. A tool that returned as
        its deadline passed keeps its result."""
        timeout = tool.timeout if tool.timeout is not None else self.opts.tool_timeout
        with self.opts.clock.move_on_after(timeout if timeout > 0 else None) as scope:
            try:
                with tool_call_context(context):
                    value = await tool.invoke(args)
            except ToolInterrupted as exc:  # cut short, effect unknown: never run again
                content = _finish_interrupted(exc, self.opts.max_tool_result_chars)
                outcome = ToolOutcome.INTERRUPTED
            except Exception as exc:
                limit = min(2000, self.opts.max_tool_result_chars)
                content, outcome = format_error(exc, limit), ToolOutcome.ERROR
            else:
                content, rendered = render_result(value, self.opts.max_tool_result_chars)
                outcome = ToolOutcome.OK if rendered else ToolOutcome.ERROR
        if scope.cancelled_caught:
            message = f"tool {tool.name} timed out after {timeout:g} s"
            fatal = ToolTimeoutError(message) if tool.fatal_timeout else None
            return _Answer(f"error: {message}", ToolOutcome.TIMEOUT, fatal)
        return _Answer(content, outcome)

    def _resolve(self, call: ToolCall) -> tuple[Tool, dict[str, Any]] | str:
        """The called tool and its checked arguments, or the error to answer the call with (an
        unknown tool, arguments that do not fit)."""
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return f"error: unknown tool {call.name!r}; the tools are: {known}"
        try:
            return tool, parse_arguments(tool, call.arguments)
        except ToolArgumentError as exc:
            return f"error: invalid arguments for {tool.name}: {exc}"

    async def _ask_gate(
        self, tool: Tool, args: dict[str, Any], turn: int, caller: Caller | None
    ) -> Decision:
        """The permission gate's decision, recorded. The gate tries its rules on every name
        of the tool (an MCP tool's name on its server, say, besides the one it is offered
        under), and the log records them all."""
        assert self.gate is not None
        # The prompt's timeout runs on the run's clock, as every other wait the run owns.
        decision = await self.gate.check(
            tool.name,
            args,
            aliases=tool.aliases,
            caller=caller,
            read_only=tool.read_only,
            destructive=tool.destructive,
            clock=self.opts.clock,
        )
        self.conv.record(
            PermissionDecision(
                tool=tool.name,
                aliases=tool.aliases,
                allowed=decision.allowed,
                reason=decision.reason,
                turn=turn,
                caller=to_originator(caller),
                mode=str(decision.mode),
            )
        )
        return decision


def _finish_interrupted(exc: ToolInterrupted, max_chars: int) -> str:
    """The answer to a call cut short: what happened, and that its effect is unknown."""
    text = format_error(exc, min(2000, max_chars)).removeprefix("error: ToolInterrupted: ")
    return f"interrupted: {text}; it may or may not have taken effect. Check before you repeat it."

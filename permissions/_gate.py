"""Gate: the permission check the driver runs before every tool call."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

import anyio
import attrs

from ._caller import Caller
from ._decision import Decision, decide
from ._errors import GateWouldDeadlock
from ._mode import Mode
from ._request import PermissionRequest, Prompter
from ._rules import Rule, known_names, to_rules

_MAX_ERROR_TEXT = 200


class _Deadlines(Protocol):
    """What the gate needs of a clock: a timeout scope. ``scheduler.Clock`` (and its
    ``FakeClock``) has it; the gate names only this method so that permissions depends on
    nothing else of ours."""

    def move_on_after(self, seconds: float | None) -> AbstractContextManager[anyio.CancelScope]:
        """A cancel scope cancelled ``seconds`` from now on this clock."""
        ...


def _positive_timeout(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if math.isnan(value) or value <= 0:
        raise ValueError(
            f"Gate.prompt_timeout must be > 0 seconds (math.inf for no limit), got {value!r}"
        )


@attrs.frozen(eq=False)
class Gate:
    """Decides whether a tool call may run, by mode, rules and (in ASK mode) a prompter.

    ``allow`` and ``deny`` take ``Rule`` objects or glob strings (shorthand for
    ``Rule(tool=s)``); a matching deny rule wins over everything, in every mode (see ``Mode``).
    A rule is tried on every name the tool is known by (``check``'s ``aliases``), and
    matches when it matches any of them.
    A prompt is bounded by ``prompt_timeout`` seconds, on the clock ``check`` is given (real
    time by default; a run passes its own): a prompter that runs out of time or raises is a
    denial whose reason says so; cancellation of the caller still propagates.
    Call ``startup_check()`` before a run so a gate that would wait forever fails at once.
    """

    mode: Mode = attrs.field(default=Mode.ASK, converter=Mode)
    prompter: Prompter | None = None
    allow: tuple[Rule, ...] = attrs.field(default=(), converter=to_rules, kw_only=True)
    deny: tuple[Rule, ...] = attrs.field(default=(), converter=to_rules, kw_only=True)
    prompt_timeout: float = attrs.field(
        default=60.0, converter=float, validator=_positive_timeout, kw_only=True
    )

    def startup_check(self) -> None:
        """Raise ``GateWouldDeadlock`` when the gate could prompt but has no prompter."""
        if self.mode.can_prompt and self.prompter is None:
            raise GateWouldDeadlock(
                f"the permission gate is in {self.mode.value!r} mode, which asks a prompter "
                "about tool calls that no allow rule covers, but no prompter is set: pass "
                "Gate(prompter=...) (permissions.TerminalPrompter() for a terminal), or choose "
                "a mode that never prompts (Mode.ALLOW, Mode.YOLO or Mode.PLAN)"
            )

    async def check(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        aliases: Iterable[str] = (),
        caller: Caller | None = None,
        read_only: bool = False,
        destructive: bool = False,
        clock: _Deadlines | None = None,
    ) -> Decision:
        """Decide whether ``tool`` may run with ``arguments`` for ``caller``.

        ``tool`` is the name the tool was called by; ``aliases`` are the other names it is
        known by (an MCP tool's own name on its server, ``{server}__{tool}``). Every rule is
        tried on all of them: a deny rule that matches any name denies, an allow rule that
        matches any name allows (deny rules first), so the decision is the same whichever
        name the tool is offered under. A prompter is shown them all (``PermissionRequest``).

        ``prompt_timeout`` runs on ``clock`` (any ``scheduler.Clock``; None: real time, as
        :func:`anyio.move_on_after`), so a test's ``FakeClock`` times prompts out when it is
        advanced. ``destructive`` is passed on to the prompter (it decides nothing here).
        Never raises for a prompter's failure or timeout (those are denials); only
        the caller's own cancellation propagates.
        """
        names = known_names(tool, aliases)
        decision = decide(
            self.mode, self.allow, self.deny, names, caller=caller, read_only=read_only
        )
        if decision is not None:
            return decision
        if self.prompter is None:
            return Decision(False, f"{self.mode.value} mode: no prompter is set to ask", self.mode)
        request = PermissionRequest(
            tool, arguments, caller, read_only, destructive, aliases=names[1:]
        )
        return await self._prompt(self.prompter, request, clock)

    async def _prompt(
        self, prompter: Prompter, request: PermissionRequest, clock: _Deadlines | None
    ) -> Decision:
        answer: object = False
        # math.inf (no limit) is None to a clock, as move_on_after(inf) is to anyio.
        limit = None if math.isinf(self.prompt_timeout) else self.prompt_timeout
        deadline = clock.move_on_after(limit) if clock is not None else anyio.move_on_after(limit)
        try:
            with deadline as scope:
                answer = await prompter(request)
        except Exception as exc:  # a failing prompter is a denial; cancellation is not caught
            text = f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_TEXT]
            return Decision(False, f"denied: prompter failed: {text}", self.mode, True)
        if scope.cancelled_caught or scope.cancel_called:
            reason = f"denied: prompter timed out after {self.prompt_timeout:g} s"
            return Decision(False, reason, self.mode, True)
        if answer is True:
            return Decision(True, "allowed by prompter", self.mode, True)
        return Decision(False, "denied by prompter", self.mode, True)

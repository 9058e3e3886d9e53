"""Gate prompting in ASK mode: answers, timeouts, failures, cancellation, startup_check."""

from __future__ import annotations

import math

import anyio
import pytest

from permissions import (
    Caller,
    Decision,
    Gate,
    GateWouldDeadlock,
    Mode,
    PermissionRequest,
    PermissionsError,
)
from scheduler import FakeClock

from .permissions_helpers import NeverAnswers, Raising, RecordingPrompter, check_timing_out

pytestmark = pytest.mark.anyio


class TestPrompterAnswers:
    """What the prompter is asked and how its answer becomes a decision."""

    async def test_yes_allows(self, yes: RecordingPrompter) -> None:
        """True from the prompter allows the call."""
        assert Decision(True, "allowed by prompter", Mode.ASK, True) == await Gate(
            prompter=yes
        ).check("t", {})

    async def test_no_denies(self, no: RecordingPrompter) -> None:
        """False from the prompter denies the call."""
        assert Decision(False, "denied by prompter", Mode.ASK, True) == await Gate(
            prompter=no
        ).check("t", {})

    @pytest.mark.parametrize("answer", [1, "yes", None, object()])
    async def test_only_true_allows(self, answer: object) -> None:
        """A truthy answer that is not True denies."""
        decision = await Gate(prompter=RecordingPrompter(answer)).check("t", {})
        assert (False, True) == (decision.allowed, decision.prompted)

    async def test_request_carries_the_call(self, yes: RecordingPrompter) -> None:
        """The prompter sees the tool, a read-only copy of the arguments, the caller and flag."""
        caller = Caller(identity="x", labels={"team": "ops"}, admin=True)
        arguments = {"path": "/etc"}
        await Gate(prompter=yes).check("read", arguments, caller=caller, read_only=True)
        arguments["path"] = "changed"
        assert [PermissionRequest("read", {"path": "/etc"}, caller, True)] == yes.requests
        with pytest.raises(TypeError):
            yes.requests[0].arguments["path"] = "x"  # type: ignore[index]


class TestPrompterFailures:
    """A prompter that times out or raises is a denial, never an exception."""

    async def test_timeout_denies(self) -> None:
        """A prompter that never answers is denied once prompt_timeout has passed on the
        clock, and not before."""
        gate = Gate(prompter=NeverAnswers(), prompt_timeout=30)
        decision = await check_timing_out(gate, FakeClock())
        assert Decision(False, "denied: prompter timed out after 30 s", Mode.ASK, True) == (
            decision
        )

    async def test_late_answer_after_swallowed_cancel_is_denied(self) -> None:
        """A prompter that swallows the timeout's cancellation and says yes is still denied."""

        async def stubborn(request: PermissionRequest, /) -> bool:
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                return True  # misbehaving on purpose
            raise AssertionError("unreachable")

        decision = await check_timing_out(Gate(prompter=stubborn, prompt_timeout=30), FakeClock())
        assert (False, True) == (decision.allowed, decision.prompted)
        assert "timed out" in decision.reason

    async def test_no_limit_is_no_deadline_on_a_clock_either(self) -> None:
        """prompt_timeout=math.inf on a clock never times the prompt out, however far the
        clock moves."""
        clock, prompter = FakeClock(), NeverAnswers()
        gate = Gate(prompter=prompter, prompt_timeout=math.inf)
        result: list[Decision] = []

        async def ask() -> None:
            result.append(await gate.check("t", {}, clock=clock))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await prompter.started.wait()
            clock.advance(1e9)
            await anyio.wait_all_tasks_blocked()
            assert [] == result
            tg.cancel_scope.cancel()

    async def test_raising_prompter_denies(self) -> None:
        """A prompter that raises is a denial naming the error."""
        decision = await Gate(prompter=Raising(RuntimeError("tty gone"))).check("t", {})
        assert (
            Decision(False, "denied: prompter failed: RuntimeError: tty gone", Mode.ASK, True)
            == decision
        )

    async def test_prompter_timeout_error_is_a_failure(self) -> None:
        """A TimeoutError raised by the prompter itself is reported as a prompter failure."""
        decision = await Gate(prompter=Raising(TimeoutError("own"))).check("t", {})
        assert "denied: prompter failed: TimeoutError: own" == decision.reason

    async def test_long_error_text_is_truncated(self) -> None:
        """The error text in the reason is bounded."""
        decision = await Gate(prompter=Raising(ValueError("x" * 5000))).check("t", {})
        assert len(decision.reason) < 300

    async def test_cancellation_propagates(self) -> None:
        """The caller's own cancellation leaves check() as a cancellation, not a decision."""
        prompter = NeverAnswers()
        gate = Gate(prompter=prompter, prompt_timeout=60)
        result: list[Decision] = []
        with anyio.move_on_after(0.05) as scope:
            result.append(await gate.check("t", {}))
        assert (True, [], True) == (scope.cancelled_caught, result, prompter.started.is_set())

    async def test_cancellation_from_a_task_group(self) -> None:
        """Cancelling the surrounding task group ends a pending prompt at once."""
        prompter = NeverAnswers()
        result: list[Decision] = []

        async def ask() -> None:
            result.append(await Gate(prompter=prompter).check("t", {}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await prompter.started.wait()
            tg.cancel_scope.cancel()
        assert [] == result


class TestStartupCheck:
    """startup_check: a gate that could prompt must have a prompter."""

    def test_ask_without_prompter_would_deadlock(self) -> None:
        """ASK mode with no prompter raises GateWouldDeadlock naming the fix."""
        with pytest.raises(GateWouldDeadlock, match=r"Gate\(prompter=\.\.\.\)"):
            Gate(Mode.ASK).startup_check()

    def test_error_is_a_permissions_and_value_error(self) -> None:
        """GateWouldDeadlock is a PermissionsError and a ValueError."""
        assert (True, True) == (
            issubclass(GateWouldDeadlock, PermissionsError),
            issubclass(GateWouldDeadlock, ValueError),
        )

    def test_ask_with_prompter_is_fine(self, yes: RecordingPrompter) -> None:
        """ASK mode with a prompter passes."""
        assert None is Gate(Mode.ASK, yes).startup_check()  # type: ignore[func-returns-value]

    @pytest.mark.parametrize("mode", [Mode.ALLOW, Mode.YOLO, Mode.PLAN])
    def test_modes_that_never_prompt_need_no_prompter(self, mode: Mode) -> None:
        """Modes that never prompt pass without a prompter."""
        assert None is Gate(mode).startup_check()  # type: ignore[func-returns-value]

    def test_every_prompting_mode_is_checked(self) -> None:
        """Every mode that can prompt fails the check without a prompter."""
        prompting = [mode for mode in Mode if mode.can_prompt]
        assert [Mode.ASK] == prompting
        for mode in prompting:
            with pytest.raises(GateWouldDeadlock):
                Gate(mode).startup_check()

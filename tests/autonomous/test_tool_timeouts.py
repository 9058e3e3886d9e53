"""A tool call's timeout is its own cancel scope: a late cancel never reaches past the call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import anyio
import pytest

from autonomous import (
    ModelResponse,
    RetryDecision,
    StopReason,
    ToolTimeoutError,
    function_tool,
    run_autonomous,
)
from autonomous.testing import ScriptedModel, call, done, reply

from .helpers import builder

pytestmark = pytest.mark.anyio

_TIMEOUT = 0.05
_HOLD = 0.15  # past every wake-up below: they all fall due in one loop iteration


def racer(wake_after: float) -> Callable[[], Awaitable[str]]:
    """A tool that asks to wake after ``wake_after`` s, then holds the loop (a blocking call
    elsewhere in the program) until both that wake-up and its deadline are due.

    The loop then runs both in one iteration, in order of their times: the tool finishes in
    the same iteration as its timeout fires, before or after it.
    """

    async def finish_at_the_deadline() -> str:
        """Sleep a moment while the loop is held, then return."""
        asyncio.get_running_loop().call_later(0.005, time.sleep, _HOLD)
        await anyio.sleep(wake_after)
        return "finished"

    return finish_at_the_deadline


async def after_a_pause(messages: object, tools: object) -> ModelResponse:
    """The next model call: it suspends, so a stray cancel would land in it."""
    await anyio.sleep(0.01)
    return done("went on")


class TestATimeoutAsTheToolFinishes:
    @pytest.mark.parametrize("wake_after", [0.02, _TIMEOUT, 0.08])
    async def test_the_run_goes_on(self, wake_after: float) -> None:
        """A tool finishing in the loop iteration its timeout fires in is answered (its
        result or the timeout), and the next model call runs undisturbed."""
        tool = function_tool(racer(wake_after), timeout=_TIMEOUT)
        model = ScriptedModel([call("finish_at_the_deadline"), after_a_pause, reply("bye")])
        with anyio.fail_after(10):
            result = await run_autonomous(builder(model, tools=[tool]), "go")
        answers = [m["content"] for m in model.last_messages if m["role"] == "tool"]
        assert (StopReason.COMPLETED, "went on") == (result.reason, result.done_detail)
        assert answers[0] in (
            "finished",
            "error: tool finish_at_the_deadline timed out after 0.05 s",
        )

    @pytest.mark.parametrize("wake_after", [0.02, _TIMEOUT, 0.08])
    async def test_a_fatal_timeout_tool_is_a_timeout_error_or_its_result(
        self, wake_after: float
    ) -> None:
        """With fatal_timeout, the same race either returns the tool's result or fails the
        turn with ToolTimeoutError: never another error."""
        errors: list[BaseException] = []

        def policy(error: BaseException, attempt: int) -> RetryDecision:
            errors.append(error)
            return RetryDecision.ABORT_RUN

        tool = function_tool(racer(wake_after), timeout=_TIMEOUT, fatal_timeout=True)
        model = ScriptedModel([call("finish_at_the_deadline"), after_a_pause, reply("bye")])
        with anyio.fail_after(10):
            result = await run_autonomous(
                builder(model, tools=[tool]),
                "go",
                retry_policy=policy,
            )
        assert all(isinstance(e, ToolTimeoutError) for e in errors), errors
        assert result.reason in (StopReason.COMPLETED, StopReason.RETRY_POLICY_ABORTED)

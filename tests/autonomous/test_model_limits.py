"""What a dollar cap reserves for a call's output: litellm's table speaks for litellm models
only; any other model is reserved its own largest answer so far, whatever its name."""

from __future__ import annotations

import pytest

from autonomous import Agent, StopReason, run_autonomous
from autonomous._models import LiteLLMModel, output_limit
from autonomous.testing import ScriptedModel, call, reply
from usage import Pricing

#: Output at $1 per thousand tokens: litellm's 16,384-token limit for gpt-4o-mini costs $16.38.
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=1000.0)


class TestOutputLimit:
    def test_a_litellm_model_has_its_table_limit(self) -> None:
        """litellm's bundled table lists gpt-4o-mini's most output tokens per call."""
        assert 16384 == output_limit(LiteLLMModel("openai/gpt-4o-mini"))

    def test_a_model_that_is_not_litellms_has_none_whatever_its_name(self) -> None:
        """A scripted model named like a litellm model is not that model."""
        assert None is output_limit(ScriptedModel(name="openai/gpt-4o-mini"))


class TestScriptedModelUnderADollarCap:
    @pytest.mark.anyio
    async def test_its_calls_are_not_refused_for_a_limit_that_is_not_its_own(self) -> None:
        """$1 would not cover 16,384 output tokens of gpt-4o-mini at these prices; a scripted
        model of that name is reserved its own answers' size, so every call runs."""
        steps = [
            reply("one", output_tokens=10),
            call("report_done", {"state": "done", "detail": "ok"}, output_tokens=10),
        ]
        model = ScriptedModel(steps, name="openai/gpt-4o-mini")
        result = await run_autonomous(
            lambda extra: Agent(model, tools=extra),
            "work",
            max_turns=3,
            max_cost_usd=1.0,
            pricing=PRICING,
        )
        assert StopReason.COMPLETED == result.reason, result.error
        assert 2 == result.turns

"""Budgets never overshot by a call: each model call is estimated first, and refused when it
would pass ``max_input_tokens`` or ``max_cost_usd``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autonomous import Agent, StopReason, Tool, function_tool, run_autonomous
from autonomous._options import make_options
from autonomous._run._decide import Spending, call_would_pass, estimate_input_tokens, prompt_chars
from autonomous.testing._server import ScriptedServer, call, reply
from tests.support import API_KEY, MODEL
from usage import Pricing, Usage

#: Instructions of about 1,500 estimated tokens: each call is a sizeable part of a cap.
LONG = "Watch the disk and report how full it is. " * 140
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0, cached_input_per_mtok=0.5)


async def check_disk(path: str) -> str:
    """Report the disk usage of path."""
    return f"{path}: 42% used"


def build(server: ScriptedServer, **kwargs: Any) -> Callable[[list[Tool]], Agent]:
    """An Agent with long instructions on the scripted server."""

    def make(extra: list[Tool]) -> Agent:
        return Agent(
            MODEL,
            instructions=LONG,
            tools=[function_tool(check_disk), *extra],
            api_base=server.api_base,
            api_key=API_KEY,
            **kwargs,
        )

    return make


def workload() -> ScriptedServer:
    """A server billing prompts from the request: each turn a tool call, then an answer."""
    steps = [call("check_disk", {"path": "/"}, output_tokens=20), reply("ok", output_tokens=20)]
    return ScriptedServer(*(steps * 50), prefix_cache=True)


class TestEstimate:
    def test_without_a_last_call_four_characters_a_token(self) -> None:
        """The first call of a run is estimated at four characters a token."""
        assert 250 == estimate_input_tokens(1000, 0, 0)

    def test_a_grown_prompt_adds_the_new_text(self) -> None:
        """The last call's count plus the new characters at four a token."""
        assert 1000 + 25 == estimate_input_tokens(900, 800, 1000)

    def test_a_shrunk_prompt_scales_the_last_count(self) -> None:
        """History dropped: the last count in proportion."""
        assert 500 == estimate_input_tokens(400, 800, 1000)

    @given(st.integers(0, 10**7), st.integers(0, 10**7), st.integers(0, 10**7))
    def test_more_text_never_estimates_fewer_tokens(self, chars: int, last: int, n: int) -> None:
        """The estimate grows with the prompt."""
        assert estimate_input_tokens(chars, last, n) <= estimate_input_tokens(chars + 1, last, n)

    def test_the_prompt_is_measured_as_compact_json(self) -> None:
        """Messages and tool specs, as JSON text without spaces."""
        assert len('[{"role":"user","content":"hé"},{"a":1}]') == prompt_chars(
            [{"role": "user", "content": "hé"}], [{"a": 1}]
        )


class TestCallWouldPass:
    def test_reaching_a_cap_exactly_is_allowed(self) -> None:
        """A call that lands on the cap may run; one token more may not."""
        opts = make_options({"max_input_tokens": 100})
        spent = Spending(input_tokens=60)
        assert (None, StopReason.MAX_TOKENS_EXCEEDED) == (
            call_would_pass(opts, spent, input_tokens=40, most_cost_usd=0.0),
            call_would_pass(opts, spent, input_tokens=41, most_cost_usd=0.0),
        )

    def test_cost_cap(self) -> None:
        """A call whose most cost would pass the dollar cap is refused."""
        opts = make_options({"max_cost_usd": 1.0})
        assert StopReason.MAX_COST_EXCEEDED == call_would_pass(
            opts, Spending(cost_usd=0.7), input_tokens=0, most_cost_usd=0.31
        )

    def test_zero_caps_are_off(self) -> None:
        """Without caps no call is refused."""
        assert None is call_would_pass(
            make_options({}), Spending(), input_tokens=10**12, most_cost_usd=10**6
        )


@pytest.mark.anyio
class TestRuns:
    async def test_the_token_cap_is_never_passed(self) -> None:
        """The run stops before the call that would pass the input cap: the server never
        receives it, and the run ends within one call of the cap."""
        with workload() as srv:
            result = await run_autonomous(build(srv), "watch /", max_input_tokens=10_000)
            billed = srv.prompt_usage
        assert StopReason.MAX_TOKENS_EXCEEDED == result.reason
        assert (len(billed), sum(b.prompt_tokens for b in billed)) == (
            srv.request_count,
            result.input_tokens,
        )
        assert result.input_tokens <= 10_000
        assert 10_000 - result.input_tokens < billed[-1].prompt_tokens + 100

    async def test_the_cost_cap_is_never_passed(self) -> None:
        """The run stops before the call that could pass the dollar cap, counting its input
        as uncached and its output as max_tokens."""
        with workload() as srv:
            result = await run_autonomous(
                build(srv, max_tokens=200), "watch /", max_cost_usd=0.01, pricing=PRICING
            )
            billed = srv.prompt_usage
        assert StopReason.MAX_COST_EXCEEDED == result.reason
        assert result.cost_usd <= 0.01
        last_most = PRICING.uncached_cost(billed[-1].prompt_tokens, 200)
        assert 0.01 - result.cost_usd < last_most + PRICING.uncached_cost(100, 0)
        spent = sum((Usage(b.prompt_tokens, 20, b.cached_tokens) for b in billed), start=Usage())
        assert PRICING.cost(spent) == pytest.approx(result.cost_usd)

    async def test_a_run_far_from_its_caps_is_unaffected(self) -> None:
        """With caps far away every turn runs, and every call reaches the server."""
        with workload() as srv:
            result = await run_autonomous(
                build(srv),
                "watch /",
                max_turns=3,
                max_input_tokens=10**7,
                max_cost_usd=100.0,
                pricing=PRICING,
            )
            assert (StopReason.MAX_TURNS_EXCEEDED, 3, 6) == (
                result.reason,
                result.turns,
                srv.request_count,
            )

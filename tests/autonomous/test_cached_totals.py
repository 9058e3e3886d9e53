"""Cached input tokens counted everywhere: run totals, checkpoints, results, CLI, telemetry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from autonomous import Agent, StopReason, Tool, function_tool, resume_autonomous, run_autonomous
from autonomous._cli._run import checkpoint_summary, result_summary
from autonomous._cli._show import _describe_checkpoint
from autonomous._model import ModelResponse
from autonomous._observe._telemetry import Telemetry
from autonomous._run._decide import Spending
from autonomous.testing._server import ScriptedServer, call, reply
from eventlog import SCHEMA_VERSION, Checkpoint, SessionRef
from eventlog.codec import decode_payload
from tests.support import API_KEY, MODEL
from usage import Pricing, Usage

from ..support.otel import Otel
from .helpers import checkpoints, memory_session

#: Instructions of about 1,500 estimated tokens, so the simulated provider caches them.
LONG = "Watch the disk and report how full it is. " * 140


async def check_disk(path: str) -> str:
    """Report the disk usage of path."""
    return f"{path}: 42% used"


def http_build(server: ScriptedServer, session: SessionRef) -> Callable[[list[Tool]], Agent]:
    """An Agent with long instructions on the scripted server."""

    def build(extra: list[Tool]) -> Agent:
        return Agent(
            MODEL,
            instructions=LONG,
            tools=[function_tool(check_disk), *extra],
            session=session,
            api_base=server.api_base,
            api_key=API_KEY,
        )

    return build


class TestTotals:
    def test_a_call_adds_its_cached_tokens(self) -> None:
        """add_call adds the cached part of the input to the totals."""
        totals = Spending().add_call(2000, 10, 0.1, 1024).add_call(3000, 10, 0.1, 2048)
        assert (5000, 3072) == (totals.input_tokens, totals.cached_input_tokens)

    def test_an_old_checkpoint_has_no_cached_tokens(self) -> None:
        """A checkpoint written before the field existed decodes, and counts 0 cached."""
        old = decode_payload(
            "checkpoint",
            '{"turns":1,"input_tokens":2,"output_tokens":3,"cost_usd":0.5,"next_prompt":"go"}',
            v=SCHEMA_VERSION,
        )
        assert isinstance(old, Checkpoint)
        assert Spending(1, 2, 3, 0.5, 0, 0) == Spending.from_checkpoint(old)


@pytest.mark.anyio
class TestRuns:
    async def test_a_run_counts_what_the_provider_read_from_its_cache(self) -> None:
        """Over three model calls the result, the last checkpoint and the cost count the cached
        tokens the (simulated) provider reported."""
        pricing = Pricing(input_per_mtok=1.0, output_per_mtok=2.0, cached_input_per_mtok=0.5)
        steps = [call("check_disk", {"path": "/"}), reply("42%"), reply("still 42%")]
        ref = memory_session()
        with ScriptedServer(*steps, prefix_cache=True) as srv:
            result = await run_autonomous(
                http_build(srv, ref), "watch /", max_turns=2, pricing=pricing
            )
            billed = srv.prompt_usage
        cached = sum(b.cached_tokens for b in billed)
        prompt = sum(b.prompt_tokens for b in billed)
        assert (StopReason.MAX_TURNS_EXCEEDED, 3) == (result.reason, len(billed))
        assert cached > 0
        assert (prompt, cached) == (result.input_tokens, result.cached_input_tokens)
        assert cached == (await checkpoints(ref))[-1].cached_input_tokens
        expected = pricing.cost(Usage(prompt, result.output_tokens, cached))
        assert expected == pytest.approx(result.cost_usd)
        assert result.cost_usd < pricing.cost(Usage(prompt, result.output_tokens))

    async def test_a_resume_carries_the_cached_tokens_on(self) -> None:
        """A resumed run starts from the checkpoint's cached tokens and adds its own."""
        ref = memory_session()
        with ScriptedServer(reply("a"), reply("b"), prefix_cache=True) as srv:
            first = await run_autonomous(http_build(srv, ref), "watch /", max_turns=1)
            second = await resume_autonomous(
                lambda extra, _sid: http_build(srv, ref)(extra), ref, max_turns=2
            )
            billed = srv.prompt_usage
        assert (0, billed[1].cached_tokens) == (
            first.cached_input_tokens,
            second.cached_input_tokens,
        )
        assert second.cached_input_tokens > 0


class TestShown:
    def test_show_prints_the_cached_tokens(self) -> None:
        """show's checkpoint line gives the cached part of the input."""
        cp = Checkpoint(2, 3000, 40, 0.01, "continue", cached_input_tokens=2048)
        assert "tokens=3000/40 cached=2048 " in _describe_checkpoint(cp, utc=True)

    def test_show_leaves_it_out_when_nothing_was_cached(self) -> None:
        """A run without a cache shows its line as before."""
        assert "cached" not in _describe_checkpoint(Checkpoint(1, 3, 4, 0.0, "go"), utc=True)

    def test_run_summaries_carry_the_cached_tokens(self) -> None:
        """run's summary (JSON and text) has cached_input_tokens, from a result or a checkpoint."""
        from autonomous import RunResult
        from eventlog import SessionKey

        key = SessionKey("a", "u", "s")
        result = RunResult(StopReason.COMPLETED, input_tokens=9, cached_input_tokens=7)
        cp = Checkpoint(1, 9, 1, 0.0, "go", cached_input_tokens=5)
        assert (7, 5) == (
            result_summary(key, result)["cached_input_tokens"],
            checkpoint_summary(key, cp)["cached_input_tokens"],
        )


class TestTelemetry:
    def test_chat_span_carries_the_cache_attributes(self) -> None:
        """The GenAI conventions' cache read and cache creation counts go on the chat span."""
        otel = Otel()
        telemetry: Telemetry = otel.telemetry
        answer = ModelResponse(usage=Usage(2000, 5, 1024, 512), model="m")
        with telemetry.model_span(1, "m", provider="anthropic", conversation="c") as chat:
            telemetry.set_response(chat, answer, 0.0)
        attributes: dict[str, Any] = dict(otel.by_name()["chat m"].attributes or {})
        assert (1024, 512) == (
            attributes["gen_ai.usage.cache_read.input_tokens"],
            attributes["gen_ai.usage.cache_creation.input_tokens"],
        )

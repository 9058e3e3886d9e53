"""ScriptedServer and ScriptedModel refuse what OpenAI refuses, as OpenAI does (HTTP 400)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from autonomous import Agent, ModelError, RetryDecision, StopReason, Tool, run_autonomous
from autonomous.testing import (
    ConversationRejected,
    ScriptedModel,
    done,
    watch_rejections,
)
from autonomous.testing import reply as model_reply
from autonomous.testing._rules import INVALID_JSON
from autonomous.testing._server import ScriptedServer, reply
from tests.support import MODEL, litellm_model

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
USER = {"role": "user", "content": "How full is the disk?"}
DANGLING = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "df", "arguments": "{}"}}
    ],
}
ORPHAN = {"role": "tool", "tool_call_id": "call_9", "content": "42%"}


def post(server: ScriptedServer, content: bytes) -> httpx.Response:
    """POST raw bytes to the server's chat endpoint."""
    headers = {"Content-Type": "application/json"}
    return httpx.post(f"{server.api_base}/chat/completions", content=content, headers=headers)


class TestServer:
    async def test_litellm_gets_a_400_for_an_unanswered_call(
        self, scripted_server: ScriptedServer
    ) -> None:
        """Through litellm's HTTP path: BadRequestError with OpenAI's message, no step used."""
        scripted_server.push(reply("never played"))
        with watch_rejections() as seen, pytest.raises(ModelError) as raised:
            await litellm_model(scripted_server).complete([USER, DANGLING, USER], [])
        cause: Any = raised.value.__cause__
        # Named, not imported: importing litellm at collection would cost every test run seconds.
        assert ("BadRequestError", 400) == (type(cause).__name__, cause.status_code)
        assert "did not have response messages: call_1" in str(raised.value)
        assert [r.param for r in seen] == ["messages.[1].role"]
        assert scripted_server.rejections == seen
        assert (1, 1) == (scripted_server.request_count, scripted_server.pending)

    async def test_a_well_formed_request_is_answered(self, scripted_server: ScriptedServer) -> None:
        """The check lets a good conversation through to the script."""
        scripted_server.push(reply("fine"))
        answer = {**ORPHAN, "tool_call_id": "call_1"}
        response = await litellm_model(scripted_server).complete([USER, DANGLING, answer], [])
        assert ("fine", []) == (response.text, scripted_server.rejections)

    def test_the_error_body_is_openai_shaped(self, scripted_server: ScriptedServer) -> None:
        """400, invalid_request_error, the parameter named."""
        body = {"model": MODEL, "messages": [ORPHAN]}
        with watch_rejections():
            response = post(scripted_server, json.dumps(body).encode())
        assert 400 == response.status_code
        assert response.json() == {
            "error": {
                "message": "Invalid parameter: messages with role 'tool' must be a response to "
                "a preceeding message with 'tool_calls'.",
                "type": "invalid_request_error",
                "param": "messages.[0].role",
                "code": None,
            }
        }

    @pytest.mark.parametrize(
        "content",
        [
            # A lone surrogate escaped in JSON text: Python's json reads it, OpenAI does not.
            b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
            # The same surrogate encoded as bytes (json.loads of bytes would let it through).
            b'{"model": "m", "messages": [{"role": "user", "content": "a\xed\xa0\x80b"}]}',
            b'{"model": "m", "messages": [{"role": "user", "content": "a\xffb"}]}',
            b'{"model": "m", "messages": [',
            b"[1, 2]",
        ],
    )
    def test_a_body_that_is_not_utf8_json_is_invalid_json(
        self, scripted_server: ScriptedServer, content: bytes
    ) -> None:
        """Lone surrogates, bad bytes and broken JSON all get OpenAI's invalid-JSON 400."""
        scripted_server.push(reply("never played"))
        with watch_rejections() as seen:
            response = post(scripted_server, content)
        assert (400, INVALID_JSON) == (response.status_code, response.json()["error"]["message"])
        assert 1 == len(seen) and 1 == scripted_server.pending

    def test_reset_forgets_rejections(self, scripted_server: ScriptedServer) -> None:
        """reset() clears the rejections with the requests."""
        with watch_rejections():
            post(scripted_server, b"{}")
        assert 1 == len(scripted_server.rejections)
        scripted_server.reset()
        assert [] == scripted_server.rejections


class TestScriptedModel:
    async def test_an_orphan_tool_message_is_refused(self) -> None:
        """ConversationRejected (a 400), the step kept for the next call, the refusal kept."""
        model = ScriptedModel([model_reply("later")])
        with watch_rejections() as seen, pytest.raises(ConversationRejected) as raised:
            await model.complete([USER, ORPHAN], [])
        assert 400 == raised.value.status_code
        assert "must be a response to a preceeding message" in str(raised.value)
        assert (1, 1) == (model.requests, model.remaining)
        assert model.rejections == seen == [raised.value.rejection]
        assert "later" == (await model.complete([USER], [])).text

    async def test_check_false_skips_the_check(self) -> None:
        """For benchmarks: no check, the script answers whatever it is sent."""
        model = ScriptedModel([model_reply("ok")], check=False)
        assert "ok" == (await model.complete([ORPHAN], [])).text

    async def test_a_refusal_in_a_run_is_a_model_error(self) -> None:
        """In a run, a refused request is a ModelError for the retry policy, like a 400 over HTTP.

        The tool's schema has an array without ``items``, which OpenAI refuses.
        """

        async def count(paths: list[str]) -> int:
            return len(paths)

        schema: dict[str, Any] = {"type": "object", "properties": {"paths": {"type": "array"}}}
        tool = Tool("count", "Count the paths.", schema, count)
        model = ScriptedModel([done(), model_reply("never")])
        errors: list[BaseException] = []

        def policy(exc: BaseException, attempt: int) -> RetryDecision:
            errors.append(exc)
            return RetryDecision.ABORT_RUN

        def build(extra: list[Tool]) -> Agent:
            return Agent(model, instructions="Count.", tools=[tool, *extra])

        with watch_rejections() as seen:
            result = await run_autonomous(build, "go", retry_policy=policy)
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        assert 1 == len(errors) and isinstance(errors[0], ModelError)
        assert isinstance(errors[0].__cause__, ConversationRejected)
        assert "array schema missing items" in str(errors[0])
        assert 1 == len(seen) and 2 == model.remaining


class TestWatch:
    async def test_blocks_nest_and_the_innermost_takes_the_refusal(self) -> None:
        """A refusal goes to the innermost open block only."""
        model = ScriptedModel()
        with watch_rejections() as outer:
            with watch_rejections() as inner, pytest.raises(ConversationRejected):
                await model.complete([ORPHAN], [])
            assert (1, 0) == (len(inner), len(outer))
            with pytest.raises(ConversationRejected):
                await model.complete([ORPHAN], [])
            assert 1 == len(outer)


SWALLOWED = """
import asyncio

from autonomous.testing import ConversationRejected, ScriptedModel
from tests.support.well_formed import every_request_is_one_openai_accepts


def test_swallows_a_refusal():
    model = ScriptedModel()
    try:
        asyncio.run(model.complete([{"role": "tool", "tool_call_id": "x", "content": ""}], []))
    except ConversationRejected:
        pass  # as a run does when its retry policy skips the turn


def test_sends_nothing_wrong():
    pass
"""


class TestSuiteFixture:
    def test_a_swallowed_refusal_still_fails_the_test(self, tmp_path: Path) -> None:
        """The suite's autouse fixture fails a test whose refusal never surfaced as an error."""
        (tmp_path / "test_swallowed.py").write_text(SWALLOWED)
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
            check=False,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert 1 == out.returncode, out.stdout + out.stderr
        # The refusing test errors at teardown; the clean one is untouched.
        assert "2 passed, 1 error" in out.stdout
        assert "ERROR test_swallowed.py::test_swallows_a_refusal" in out.stdout
        assert "requests OpenAI would refuse with HTTP 400 were sent" in out.stdout
        assert "must be a response to a preceeding message" in out.stdout

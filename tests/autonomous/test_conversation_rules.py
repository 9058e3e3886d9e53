"""check_chat_request refuses exactly what OpenAI's chat-completions endpoint refuses."""

from __future__ import annotations

from typing import Any

import pytest

from autonomous.testing._rules import INVALID_JSON, Rejection, check_chat_request

SYSTEM = {"role": "system", "content": "Watch the disk."}
USER = {"role": "user", "content": "How full is the disk?"}
TOOL = {
    "type": "function",
    "function": {
        "name": "check_disk",
        "description": "Report how full a mount point is.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def asks(*ids: str, content: str | None = None) -> dict[str, Any]:
    """An assistant message calling ``check_disk`` once per id."""
    calls = [
        {"id": i, "type": "function", "function": {"name": "check_disk", "arguments": "{}"}}
        for i in ids
    ]
    return {"role": "assistant", "content": content, "tool_calls": calls}


def answer(call_id: str, content: str = "/: 42% used") -> dict[str, Any]:
    """The tool message answering ``call_id``."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def check(*messages: Any, tools: Any = None, **body: Any) -> Rejection | None:
    """check_chat_request on a body with these messages (and tools when given)."""
    request: dict[str, Any] = {"model": "scripted-model", "messages": list(messages), **body}
    if tools is not None:
        request["tools"] = tools
    return check_chat_request(request)


def refused(*messages: Any, tools: Any = None, **body: Any) -> str:
    """The rejection message for a body OpenAI refuses (fails the test if it is accepted)."""
    found = check(*messages, tools=tools, **body)
    assert found is not None, "accepted a request OpenAI refuses"
    return found.message


class TestAccepted:
    @pytest.mark.parametrize(
        "messages",
        [
            [USER],
            [SYSTEM, USER, {"role": "assistant", "content": "Fine."}],
            [
                SYSTEM,
                USER,
                asks("a", "b"),
                answer("a"),
                answer("b"),
                {"role": "assistant", "content": "ok"},
            ],
            [USER, asks("a", "b"), answer("b"), answer("a")],  # answers in any order
            [USER, SYSTEM, USER, USER],  # a system message in the middle, users in a row
            [{"role": "assistant", "content": "Hello."}, USER],  # an assistant first
            [{"role": "developer", "content": "Be brief."}, USER],
            [USER, asks("a", content="Checking."), answer("a"), asks("b"), answer("b")],
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            [USER, {"role": "assistant", "content": ""}],  # empty text is still a string
        ],
    )
    def test_well_formed_conversations(self, messages: list[dict[str, Any]]) -> None:
        """Every order OpenAI takes is taken: only a tool message is tied to what precedes it."""
        assert check(*messages, tools=[TOOL]) is None

    def test_tools_absent_or_null(self) -> None:
        """No tools key, or null, is no tools."""
        assert check(USER) is None
        assert check_chat_request({"model": "m", "messages": [USER], "tools": None}) is None


class TestToolPairing:
    def test_an_unanswered_call_at_the_end(self) -> None:
        """A dangling call (a crash or stop mid-turn) names the unanswered ids."""
        message = refused(USER, asks("a", "b"), answer("a"))
        assert message.startswith("An assistant message with 'tool_calls' must be followed")
        assert message.endswith("did not have response messages: b")

    def test_an_unanswered_call_before_the_next_prompt(self) -> None:
        """The answers must come before the next non-tool message, not later."""
        message = refused(USER, asks("a"), USER, answer("a"))
        assert "did not have response messages: a" in message

    def test_a_system_message_between_call_and_result(self) -> None:
        """Even a system message may not come between a call and its result."""
        assert "did not have response messages: a" in refused(USER, asks("a"), SYSTEM, answer("a"))

    def test_a_tool_message_first(self) -> None:
        """A tool message with no assistant message calling tools before it."""
        assert "must be a response to a preceeding message" in refused(answer("a"), USER)

    def test_a_tool_message_after_a_text_answer(self) -> None:
        """A tool message after an assistant message that called nothing."""
        text = {"role": "assistant", "content": "Fine."}
        assert "must be a response to a preceeding" in refused(USER, text, answer("a"))

    def test_a_tool_message_with_an_unknown_id(self) -> None:
        """An id the preceding assistant message did not ask for."""
        message = refused(USER, asks("a"), answer("a"), answer("zzz"))
        assert "'tool_call_id' of 'zzz' not found in 'tool_calls' of previous message" in message

    def test_an_answer_to_an_earlier_turns_call(self) -> None:
        """Ids are matched against the nearest assistant message only."""
        message = refused(USER, asks("a"), answer("a"), asks("b"), answer("a"), answer("b"))
        assert "'tool_call_id' of 'a' not found" in message

    def test_two_results_for_one_call(self) -> None:
        """A duplicate result answers no pending call."""
        message = refused(USER, asks("a", "b"), answer("a"), answer("a"), answer("b"))
        assert "must be a response to a preceeding message with 'tool_calls'" in message

    def test_the_rejection_names_the_assistant_message(self) -> None:
        """The param points at the assistant message whose calls went unanswered."""
        found = check(SYSTEM, USER, asks("a"))
        assert found is not None
        assert found.param == "messages.[2].role"


class TestMessages:
    def test_missing_messages(self) -> None:
        """A body without messages."""
        found = check_chat_request({"model": "m"})
        assert found == Rejection(
            "Missing required parameter: 'messages'.", "messages", "missing_required_parameter"
        )

    def test_empty_messages(self) -> None:
        """An empty list of messages."""
        assert "empty array" in refused()

    def test_messages_not_a_list(self) -> None:
        """messages as an object."""
        assert "expected an array, but got an object" in refused_body(messages={"role": "user"})

    def test_missing_model(self) -> None:
        """A body without a model."""
        assert "model" in refused_body(model=None, messages=[USER])

    def test_a_message_that_is_not_an_object(self) -> None:
        """A bare string in the list."""
        assert "expected an object, but got a string" in refused("hello")

    def test_an_unknown_role(self) -> None:
        """Roles are a closed set."""
        message = refused({"role": "robot", "content": "beep"})
        assert message.startswith("Invalid value: 'robot'. Supported values are: 'system'")

    def test_a_missing_role(self) -> None:
        """Every message has a role."""
        assert "'messages[0].role'" in refused({"content": "hi"})

    @pytest.mark.parametrize("content", [42, {"text": "hi"}, True])
    def test_content_of_the_wrong_type(self, content: Any) -> None:
        """Content is a string, null or a list of parts: nothing else."""
        message = refused({"role": "user", "content": content})
        assert "expected one of a string or array of objects" in message

    def test_a_content_part_that_is_not_an_object(self) -> None:
        """A list content holds parts, not bare strings."""
        assert "expected an object" in refused({"role": "user", "content": ["hi"]})

    def test_a_content_part_of_an_unknown_type(self) -> None:
        """Part types depend on the role: a system message takes only text."""
        part = {"type": "image_url", "image_url": {"url": "data:,"}}
        assert "Invalid value: 'image_url'" in refused({"role": "system", "content": [part]})

    def test_null_user_content(self) -> None:
        """A user message must say something."""
        message = refused({"role": "user", "content": None})
        assert message == "Invalid value for 'content': expected a string, got null."

    def test_null_assistant_content_without_tool_calls(self) -> None:
        """An assistant message may omit content only when it calls tools."""
        assert "got null" in refused(USER, {"role": "assistant", "content": None})

    def test_a_tool_message_without_its_id(self) -> None:
        """A tool message names the call it answers."""
        assert "'messages[2].tool_call_id'" in refused(
            USER, asks("a"), {"role": "tool", "content": "x"}
        )

    def test_an_empty_tool_calls_list(self) -> None:
        """An assistant message with tool_calls: [] is refused (send no key instead)."""
        message = {"role": "assistant", "content": "ok", "tool_calls": []}
        assert "'messages[1].tool_calls': empty array" in refused(USER, message)

    def test_a_tool_call_without_an_id(self) -> None:
        """Each tool call carries the id its result answers."""
        message = asks("a")
        del message["tool_calls"][0]["id"]
        assert "'messages[1].tool_calls[0].id'" in refused(USER, message)

    def test_a_tool_call_with_non_text_arguments(self) -> None:
        """Arguments travel as JSON text, not as an object."""
        message = asks("a")
        message["tool_calls"][0]["function"]["arguments"] = {"path": "/"}
        assert "'messages[1].tool_calls[0].function.arguments'" in refused(
            USER, message, answer("a")
        )


class TestTools:
    @pytest.mark.parametrize("name", ["check disk", "check.disk", "", "ß"])
    def test_a_function_name_outside_the_pattern(self, name: str) -> None:
        """Names match ^[a-zA-Z0-9_-]+$."""
        tool = {"type": "function", "function": {"name": name}}
        assert "does not match pattern" in refused(USER, tools=[tool])

    def test_a_function_name_too_long(self) -> None:
        """At most 64 characters."""
        tool = {"type": "function", "function": {"name": "a" * 65}}
        assert "maximum length 64" in refused(USER, tools=[tool])
        assert check(USER, tools=[{"type": "function", "function": {"name": "a" * 64}}]) is None

    def test_a_tool_without_a_name(self) -> None:
        """A function tool is named."""
        tool = {"type": "function", "function": {"description": "x"}}
        assert "'tools[0].function.name'" in refused(USER, tools=[tool])

    def test_a_tool_of_an_unknown_type(self) -> None:
        """Chat completions take function tools."""
        assert "Invalid value: 'robot'" in refused(USER, tools=[{"type": "robot"}])

    def test_an_empty_tools_list(self) -> None:
        """tools: [] is refused (send no key instead)."""
        assert "'tools': empty array" in refused(USER, tools=[])

    def test_parameters_that_are_not_an_object(self) -> None:
        """The parameter schema is a JSON object."""
        tool = {"type": "function", "function": {"name": "f", "parameters": "{}"}}
        assert "'tools[0].function.parameters'" in refused(USER, tools=[tool])

    def test_an_array_parameter_without_items(self) -> None:
        """OpenAI refuses a bare array schema, naming where it is."""
        paths: dict[str, Any] = {"type": "array"}
        schema = {"type": "object", "properties": {"paths": paths}}
        tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
        message = refused(USER, tools=[tool])
        assert "In context=('properties', 'paths'), array schema missing items" in message
        paths["items"] = {"type": "string"}
        assert check(USER, tools=[tool]) is None


class TestText:
    def test_a_lone_surrogate_is_invalid_json(self) -> None:
        """A lone surrogate cannot be sent as UTF-8, so the body is not valid JSON to OpenAI."""
        found = check({"role": "user", "content": "bad \ud800 byte"})
        assert found == Rejection(INVALID_JSON, None)

    def test_a_lone_surrogate_anywhere(self) -> None:
        """In a tool result or in a tool's description alike."""
        assert refused(USER, asks("a"), answer("a", "x\udfff")) == INVALID_JSON
        tool = {"type": "function", "function": {"name": "f", "description": "\udc80"}}
        assert refused(USER, tools=[tool]) == INVALID_JSON

    def test_a_surrogate_pair_decoded_is_fine(self) -> None:
        """An astral character (one code point) is valid text."""
        assert check({"role": "user", "content": "ok \U0001f600"}) is None

    def test_the_error_body_is_openai_shaped(self) -> None:
        """What the server sends with its 400."""
        found = check(answer("a"))
        assert found is not None
        assert found.error_body() == {
            "error": {
                "message": found.message,
                "type": "invalid_request_error",
                "param": "messages.[0].role",
                "code": None,
            }
        }


def refused_body(**body: Any) -> str:
    """The rejection message for a raw body (model defaults to a valid one; None drops it)."""
    request = {"model": "scripted-model", **body}
    found = check_chat_request({k: v for k, v in request.items() if v is not None})
    assert found is not None, "accepted a request OpenAI refuses"
    return found.message

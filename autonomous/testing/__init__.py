"""Test helpers for users of the library: a scripted model, a fake clock, a scripted server.

``server`` holds the HTTP server's step builders (``server.reply``, ``server.call`` ...).

``ScriptedModel`` answers from a script without any network, for unit tests of agents and for
benchmarks that must not measure HTTP. ``ScriptedServer`` is an OpenAI-compatible HTTP server on
127.0.0.1 for tests that go through litellm's real HTTP path; ``ScriptedServer(prefix_cache=True)``
bills each prompt as OpenAI's prefix caching would (:class:`PrefixCache`, usable on its own too).

Both refuse what OpenAI refuses (an unanswered tool call, a tool message answering no call, a
bad role or content, a malformed tool, a lone surrogate): the server with an HTTP 400, the
model by raising :class:`ConversationRejected`. Both record the refusal and hand it to the
innermost :func:`watch_rejections` block, so a suite can fail every test that caused one.

Map:
    __init__.py   ScriptedModel and its steps (reply, call, calls, done), FakeClock
    _server.py    ScriptedServer, the scripted OpenAI-compatible HTTP server
    _steps.py     the steps the server plays (reply, call, error, hang ...) and their bodies
    _rules.py     what OpenAI refuses in a request (both check it)
    _watch.py     watch_rejections, where refusals are reported
    _prefix_cache.py  PrefixCache: prompt and cached tokens as OpenAI's prefix caching bills them
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from scheduler import FakeClock
from usage import Usage

from .._model import Message, ModelResponse, ToolCall
from . import _server as server
from ._prefix_cache import PrefixCache, PromptUsage
from ._rules import ConversationRejected, Rejection, check_chat_request
from ._server import ScriptedServer
from ._watch import report_rejection, watch_rejections

#: A script step: a response, an exception to raise, or a function of the request.
Step = (
    ModelResponse
    | BaseException
    | Callable[
        [Sequence[Message], Sequence[dict[str, Any]]], ModelResponse | Awaitable[ModelResponse]
    ]
)

_ids = itertools.count(1)


class ScriptExhausted(AssertionError):
    """The scripted model was called more often than its script has steps."""


def reply(
    text: str, *, input_tokens: int = 10, output_tokens: int = 5, cached: int = 0
) -> ModelResponse:
    """A final answer with no tool calls."""
    return ModelResponse(
        text=text, usage=Usage(input_tokens, output_tokens, cached), model="scripted"
    )


def call(
    name: str,
    arguments: dict[str, Any] | str | None = None,
    *,
    text: str = "",
    id: str | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> ModelResponse:
    """An answer asking for one tool call."""
    return calls(
        [(name, arguments or {})],
        text=text,
        ids=[id] if id else None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def calls(
    requested: Iterable[tuple[str, dict[str, Any] | str]],
    *,
    text: str = "",
    ids: Sequence[str] | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> ModelResponse:
    """An answer asking for several tool calls, run in this order."""
    made = []
    for i, (name, args) in enumerate(requested):
        raw = args if isinstance(args, str) else json.dumps(args)
        call_id = ids[i] if ids and i < len(ids) else f"call_{next(_ids)}"
        made.append(ToolCall(call_id, name, raw))
    return ModelResponse(
        text=text,
        tool_calls=tuple(made),
        usage=Usage(input_tokens, output_tokens),
        model="scripted",
    )


def done(detail: str = "done", *, tool: str = "report_done", **extra: Any) -> ModelResponse:
    """An answer calling the done tool with ``state="done"``."""
    return call(tool, {"state": "done", "detail": detail, **extra})


class ScriptedModel:
    """A :class:`Model` that answers from a script, step by step, with no network.

    Each step is a :class:`ModelResponse`, an exception to raise, or a function
    ``(messages, tools) -> ModelResponse`` (sync or async). ``default`` answers once the script
    is used up; without it, an exhausted script raises :class:`ScriptExhausted`.
    ``requests`` counts calls; ``last_messages`` is a copy of the newest request's messages.

    Before answering, each call is checked as OpenAI checks a request (``check=False`` skips
    that, for benchmarks): a request OpenAI would refuse raises :class:`ConversationRejected`
    (the loop reports it as a ``ModelError``, as a 400 from the HTTP path) without using a
    step, and is kept in ``rejections``.
    """

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        name: str = "scripted",
        default: Step | None = None,
        record: bool = True,
        check: bool = True,
    ) -> None:
        self._script = list(script)
        self._next = 0
        self._name = name
        self.default = default
        self.requests = 0
        self.record = record
        self.check = check
        self.rejections: list[Rejection] = []
        self.last_messages: list[Message] = []
        self.last_tools: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    @property
    def provider(self) -> str:
        """``scripted``: the ``gen_ai.provider.name`` telemetry reports for it, whatever its
        name (a scripted ``openai/gpt-4o-mini`` is not OpenAI)."""
        return "scripted"

    def push(self, *steps: Step) -> None:
        """Append steps to the script."""
        self._script.extend(steps)

    @property
    def remaining(self) -> int:
        """Steps not yet used."""
        return len(self._script) - self._next

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        """The next step's answer."""
        self.requests += 1
        if self.record:
            self.last_messages = [dict(m) for m in messages]
            self.last_tools = list(tools)
        if self.check:
            self._refuse_what_openai_refuses(messages, tools)
        if self._next < len(self._script):
            step = self._script[self._next]
            self._next += 1
        elif self.default is not None:
            step = self.default
        else:
            raise ScriptExhausted(
                f"scripted model {self._name!r} has no step for call {self.requests}"
            )
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, ModelResponse):
            return step
        made = step(messages, tools)
        if inspect.isawaitable(made):
            made = await made
        if not isinstance(made, ModelResponse):
            raise TypeError(f"a script function must return a ModelResponse, got {made!r}")
        return made

    def _refuse_what_openai_refuses(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> None:
        # The body litellm would send: no tools key when there are none.
        body: dict[str, Any] = {"model": self._name or "scripted", "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        rejection = check_chat_request(body)
        if rejection is not None:
            self.rejections.append(rejection)
            report_rejection(rejection)
            raise ConversationRejected(rejection)


__all__ = [
    "ConversationRejected",
    "FakeClock",
    "PrefixCache",
    "PromptUsage",
    "Rejection",
    "ScriptExhausted",
    "ScriptedModel",
    "ScriptedServer",
    "Step",
    "call",
    "calls",
    "done",
    "reply",
    "server",
    "watch_rejections",
]

"""LiteLLMModel: the Model protocol over ``litellm.acompletion``, the one place litellm is called.

litellm is imported on the first call, not at import time (the import takes seconds), in a worker
thread so the event loop keeps running meanwhile, with its bundled catalogs (see ``_import.py``).
Retries belong to the run's retry policy: unless the caller passes ``num_retries`` or
``max_retries``, both are 0, so neither litellm nor the OpenAI SDK under it repeats a failed call.
Every failure becomes a :class:`ModelError` with litellm's exception as the ``__cause__``;
cancellation is never caught, and it aborts the HTTP request in flight. Requests to Anthropic
models carry prompt-cache breakpoints (``_cache_control.py``), on the copy sent only.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import attrs

from usage import Usage

from .._errors import ModelError
from .._model import Message, ModelResponse, ToolCall
from ..retry import parse_retry_after
from ._cache_control import uses_cache_breakpoints, with_cache_breakpoints
from ._import import import_litellm

__all__ = ["LiteLLMModel"]

#: The longest error description kept in a ModelError message.
_MAX_DESCRIPTION = 300


@attrs.define(init=False, eq=False, repr=False)
class LiteLLMModel:
    """A :class:`~autonomous._model.Model` that calls ``litellm.acompletion``.

    ``model`` is a litellm model string (``"openai/gpt-4o-mini"``, ``"anthropic/..."``); every
    keyword goes to ``litellm.acompletion`` unchanged (``api_base``, ``api_key``, ``temperature``,
    ``timeout`` ...). ``stream=True`` streams the answer and asks for usage in the stream; the
    result is the same :class:`ModelResponse` either way. Models compare by identity.
    """

    _model: str
    _kwargs: dict[str, Any]
    _breakpoints: bool | None

    def __init__(self, model: str, **completion_kwargs: Any) -> None:
        if not model.strip():
            raise ValueError("LiteLLMModel needs a model name, e.g. 'openai/gpt-4o-mini'")
        if model.startswith("local/"):  # fail now, naming the extra, not at the first call
            from ._local_engine import check_local_model

            check_local_model(model)
        self._model = model
        self._kwargs = dict(completion_kwargs)
        self._breakpoints = None  # decided at the first call, once litellm is imported

    @property
    def name(self) -> str:
        """The litellm model string, used for pricing and the usage tracker."""
        return self._model

    @property
    def completion_kwargs(self) -> Mapping[str, Any]:
        """The keywords passed to every ``litellm.acompletion`` call (read-only)."""
        return MappingProxyType(self._kwargs)

    def __repr__(self) -> str:
        # Keywords stay out: they usually hold an API key.
        return f"LiteLLMModel({self._model!r})"

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        """One model call through litellm; raises :class:`ModelError` when it fails."""
        litellm = await import_litellm()
        if self._model.startswith("local/"):
            from ._local_provider import register_local_models

            register_local_models()  # idempotent
        kwargs = self._call_kwargs(tools)
        sent = copy.deepcopy(list(messages))
        if self._uses_breakpoints(litellm):
            sent = with_cache_breakpoints(sent)
        try:
            response = await litellm.acompletion(model=self._model, messages=sent, **kwargs)
            if kwargs.get("stream"):
                return await _collect_stream(response, self._model)
        except ModelError:
            raise
        except Exception as exc:  # BaseException (cancellation) is never caught
            raise _model_error(self._model, exc) from exc
        return _to_response(response, self._model)

    def _uses_breakpoints(self, litellm: Any) -> bool:
        """Whether this model's provider (as litellm routes the model string) is Anthropic's."""
        if self._breakpoints is None:
            try:
                _, provider, _, _ = litellm.get_llm_provider(
                    model=self._model, custom_llm_provider=self._kwargs.get("custom_llm_provider")
                )
            except Exception:  # a model litellm cannot route fails at the call, said there
                provider = ""
            self._breakpoints = uses_cache_breakpoints(self._model, str(provider))
        return self._breakpoints

    def _call_kwargs(self, tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The keywords for one call: the caller's, plus no retries and usage in streams."""
        kwargs = dict(self._kwargs)
        if "num_retries" not in kwargs and "max_retries" not in kwargs:
            # num_retries: litellm's own retry wrapper; max_retries: the OpenAI SDK's (2 by
            # default). litellm copies num_retries over max_retries, so set both or neither.
            kwargs.update(num_retries=0, max_retries=0)
        if kwargs.get("stream"):
            kwargs.setdefault("stream_options", {"include_usage": True})
        if tools:
            kwargs["tools"] = copy.deepcopy(list(tools))
        return kwargs


# --------------------------------------------------------------------------- mapping


def _field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]``: litellm hands out pydantic objects, some providers dicts."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _to_usage(raw: Any) -> Usage:
    """Our Usage from an OpenAI-style usage object (missing counts are 0).

    Cache reads are ``prompt_tokens_details.cached_tokens`` (OpenAI, and where litellm puts
    Anthropic's), else Anthropic's ``cache_read_input_tokens`` as litellm also surfaces it;
    cache writes are Anthropic's ``cache_creation_input_tokens`` (or litellm's
    ``prompt_tokens_details.cache_creation_tokens``). litellm's ``prompt_tokens`` include both.
    """
    details = _field(raw, "prompt_tokens_details")
    return Usage(
        input_tokens=_count(_field(raw, "prompt_tokens")),
        output_tokens=_count(_field(raw, "completion_tokens")),
        cached_input_tokens=_count(
            _field(details, "cached_tokens") or _field(raw, "cache_read_input_tokens")
        ),
        cache_creation_input_tokens=_count(
            _field(raw, "cache_creation_input_tokens") or _field(details, "cache_creation_tokens")
        ),
    )


def _arguments_text(arguments: Any) -> str:
    """Tool-call arguments as JSON text; some providers give a dict instead of a string."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(_field(part, "text") or "") for part in content)
    return ""


def _to_response(response: Any, model: str) -> ModelResponse:
    """Our ModelResponse from a non-streaming litellm response."""
    choices = _field(response, "choices") or []
    if not choices:
        raise ModelError(f"model call to {model} failed: the response has no choices")
    message = _field(choices[0], "message")
    tool_calls = tuple(
        ToolCall(
            id=_field(tc, "id") or f"call_{index}",
            name=_field(_field(tc, "function"), "name") or "",
            arguments=_arguments_text(_field(_field(tc, "function"), "arguments")),
        )
        for index, tc in enumerate(_field(message, "tool_calls") or ())
    )
    return ModelResponse(
        text=_text(_field(message, "content")),
        tool_calls=tool_calls,
        usage=_to_usage(_field(response, "usage")),
        model=_field(response, "model") or model,
    )


#: Causes that litellm buries in a traceback inside its message (and labels "HTTP 500", though
#: no server said so): a marker found in the message, and what it means.
_BURIED_CAUSES = (
    (
        "RecursionError",
        "the response could not be read: tool-call arguments are nested too deeply "
        "(past the JSON parser's nesting limit)",
    ),
    (
        "surrogates not allowed",
        "the request could not be encoded as UTF-8 (a lone surrogate in the conversation)",
    ),
)


def _buried(exc: BaseException) -> str | None:
    """The cause litellm buried in ``exc``'s message (deep nesting, an unencodable request)."""
    text = str(exc)
    for marker, cause in _BURIED_CAUSES:
        if marker in text or marker == type(exc).__name__:
            return cause
    return None


def _refused_unsent(exc: BaseException) -> BaseException | None:
    """The error the provider's SDK raised before sending anything (missing credentials, a
    bad client option), which litellm wraps and labels HTTP 500; None when a server answered.

    Such an error is the ``openai`` SDK's ``OpenAIError`` that is no ``APIError`` (those
    carry a request or a response); litellm keeps the original as the wrapper's context.
    """
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        sdk = {k.__name__ for k in type(seen).__mro__ if k.__module__.partition(".")[0] == "openai"}
        if sdk:  # the SDK's own error (litellm's classes of the same names live in litellm)
            return None if "APIError" in sdk else seen
        seen = seen.__cause__ or seen.__context__
    return None


def _model_error(model: str, exc: BaseException) -> ModelError:
    """Our ModelError for a failed litellm call: its description, HTTP status, Retry-After."""
    unsent = _refused_unsent(exc)
    if unsent is not None:  # no server said 500: a permanent error, said as the SDK said it
        first = (str(unsent).strip().splitlines() or [""])[0][:_MAX_DESCRIPTION]
        return ModelError(f"model call to {model} failed: {type(unsent).__name__}: {first}")
    message = f"model call to {model} failed: {_describe(exc)}"
    if _buried(exc) is not None:  # litellm labels these HTTP 500, but no server said so
        return ModelError(message)
    status = _field(exc, "status_code")
    return ModelError(
        message,
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        retry_after=_retry_after(exc),
    )


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from the ``Retry-After`` (or ``retry-after-ms``) header of the provider's
    answer, as litellm keeps it (its response's headers, or ``litellm_response_headers``)."""
    for headers in (
        _field(_field(exc, "response"), "headers"),
        _field(exc, "litellm_response_headers"),
    ):
        if not isinstance(headers, Mapping):
            continue  # httpx.Headers is a Mapping, with case-insensitive keys
        millis = headers.get("retry-after-ms")
        if isinstance(millis, str):
            seconds = parse_retry_after(millis, datetime.now(UTC))
            if seconds is not None:
                return seconds / 1000.0
        value = headers.get("retry-after")
        if isinstance(value, str):
            return parse_retry_after(value, datetime.now(UTC))
    return None


def _describe(exc: BaseException) -> str:
    """A one-line description of a provider error: its type, HTTP status and first line, or
    the cause litellm buried in its message (deep nesting, an unencodable request)."""
    text = str(exc)
    cause = _buried(exc)
    if cause is not None:
        return f"{type(exc).__name__}: {cause}"
    status = _field(exc, "status_code")
    head = type(exc).__name__ + (f" (HTTP {status})" if isinstance(status, int) else "")
    lines = text.strip().splitlines()
    first = (lines[0] if lines else "").removeprefix(f"litellm.{type(exc).__name__}: ")
    if len(first) > _MAX_DESCRIPTION:
        first = first[: _MAX_DESCRIPTION - 3] + "..."
    return f"{head}: {first}" if first else head


# --------------------------------------------------------------------------- streaming


@attrs.define
class _PartialCall:
    """One tool call being put together from stream deltas."""

    id: str = ""
    name: str = ""
    arguments: str = ""


class _StreamAccumulator:
    """Adds up one streamed answer: text, tool-call deltas by index, and usage taken once."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, _PartialCall] = {}
        self.usage = Usage()
        self.model = ""

    def add(self, chunk: Any) -> None:
        """Fold one stream chunk in."""
        self.model = _field(chunk, "model") or self.model
        usage = _to_usage(_field(chunk, "usage"))
        if usage != Usage():  # some providers repeat usage on several chunks: keep the last
            self.usage = usage
        for choice in _field(chunk, "choices") or ():
            if (_field(choice, "index") or 0) != 0:
                continue
            delta = _field(choice, "delta")
            self.text.append(_text(_field(delta, "content")))
            for tc in _field(delta, "tool_calls") or ():
                self._add_call(tc)

    def _add_call(self, delta: Any) -> None:
        call_id = _field(delta, "id") or ""
        index = _field(delta, "index")
        if not isinstance(index, int):  # no index: an unseen id starts a new call
            index = self._index_without_position(call_id)
        partial = self.calls.setdefault(index, _PartialCall())
        partial.id = call_id or partial.id
        function = _field(delta, "function")
        partial.name = partial.name or _field(function, "name") or ""
        arguments = _field(function, "arguments")
        if isinstance(arguments, str):
            partial.arguments += arguments
        elif arguments is not None:  # a whole dict at once
            partial.arguments = json.dumps(arguments)

    def _index_without_position(self, call_id: str) -> int:
        """Where a delta without an index goes: its id's call, a new call, or the last one."""
        for index, partial in self.calls.items():
            if call_id and partial.id == call_id:
                return index
        if call_id or not self.calls:
            return max(self.calls, default=-1) + 1
        return max(self.calls)

    def result(self, model: str) -> ModelResponse:
        """The answer put together so far."""
        ordered = [self.calls[index] for index in sorted(self.calls)]
        tool_calls = tuple(
            ToolCall(id=c.id or f"call_{i}", name=c.name, arguments=c.arguments)
            for i, c in enumerate(ordered)
        )
        return ModelResponse(
            text="".join(self.text),
            tool_calls=tool_calls,
            usage=self.usage,
            model=self.model or model,
        )


async def _collect_stream(stream: Any, model: str) -> ModelResponse:
    """Read a litellm stream to its end (closing it in any case) into one ModelResponse."""
    accumulator = _StreamAccumulator()
    try:
        async for chunk in stream:
            accumulator.add(chunk)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    return accumulator.result(model)

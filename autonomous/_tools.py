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
import cattrs

from autonomous._errors import ConfigurationError
from autonomous._schema import (
    IDEMPOTENCY_KEY,
    JSON_TYPES,
    description_from_doc,
    json_schema_for,
    needs_structuring,
    parameter_hints,
    unwrap_partial,
    wants_idempotency_key,
)
from autonomous._text import cleaned

_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
T = TypeVar("T")

#: Converts JSON arguments into Enum members, attrs instances, tuples and sets for function tools.
_CONVERTER = cattrs.Converter(use_alias=True, forbid_extra_keys=True)


class ToolArgumentError(ValueError):
    """The model's arguments for a tool are unusable; the message tells the model what to fix.

    Reported back to the model as the tool's result (see :func:`format_error`); it is not a turn
    error and does not end the turn.
    """


@attrs.frozen
class _Check:
    """The JSON checks of one argument: the alternatives it may match, and the coercions."""

    #: Each alternative: the JSON types it accepts and the (type, value) pairs allowed (None: any).
    alternatives: tuple[tuple[frozenset[str] | None, frozenset[Any] | tuple[Any, ...] | None], ...]
    #: The declared JSON types and the enum values, in schema order, for error messages.
    expected: tuple[str, ...]
    allowed: tuple[Any, ...]
    int_to_float: bool
    float_to_int: bool

    def apply(self, name: str, value: Any) -> Any:
        """Return the value (an int made float for a number, or an integral float made int).

        Raises ToolArgumentError when no alternative accepts it.
        """
        kind = JSON_TYPES[type(value)]
        if kind == "integer":
            if self.int_to_float:
                value, kind = float(value), "number"
        elif kind == "number" and self.float_to_int and value.is_integer():
            value, kind = int(value), "integer"
        for types, members in self.alternatives:
            if (types is None or kind in types) and (
                members is None or _is_member(kind, value, members)
            ):
                return value
        raise ToolArgumentError(self._message(name, value, kind))

    def _message(self, name: str, value: Any, kind: str) -> str:
        """Say what the argument must be: one of the enum values, or of the declared types."""
        got = _show(value)
        if self.allowed and any(
            members is not None and (types is None or kind in types)
            for types, members in self.alternatives
        ):
            listed = ", ".join(map(_show, self.allowed))
            return f"argument {name!r} must be one of {listed}; got {got}"
        got = kind if value is None else f"{kind} {got}"
        return f"argument {name!r} must be {' or '.join(self.expected)}; got {got}"


@attrs.frozen
class _Arguments:
    """What ``parse_arguments`` checks, precomputed from a tool's parameters schema."""

    required: tuple[str, ...]
    known: frozenset[str]
    closed: bool
    checks: dict[str, _Check]


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
    _arguments: _Arguments = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.name in self.aliases:  # a name is no alias of itself
            object.__setattr__(self, "aliases", tuple(a for a in self.aliases if a != self.name))
        spec = {"name": self.name, "description": self.description, "parameters": self.parameters}
        object.__setattr__(self, "_spec", {"type": "function", "function": spec})
        object.__setattr__(self, "_arguments", _arguments_of(self.parameters))

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

    Arguments are converted to the annotated types where JSON differs (Enum members, attrs
    instances, tuples, sets); a value that does not convert raises ``ToolArgumentError``.

    ``idempotent=True`` declares the tool safe to run twice (see :class:`Tool`). A function
    with an ``idempotency_key: str`` parameter gets the call's key (see
    :class:`ToolCallContext`) in it; the parameter is not shown to the model, and outside a
    run's tool call its default (or ``""``) is passed.
    """

    def build(target: Callable[..., Any]) -> Tool:
        return Tool(
            name=name if name is not None else _default_name(target),
            description=description if description is not None else description_from_doc(target),
            parameters=json_schema_for(target),
            fn=_caller(target, in_thread=sync_in_thread),
            read_only=read_only,
            timeout=timeout,
            fatal_timeout=fatal_timeout,
            idempotent=idempotent,
        )

    return build if fn is None else build(fn)


def parse_arguments(tool: Tool, raw: str) -> dict[str, Any]:
    """Parse the model's raw JSON argument text and check it against the tool's parameters.

    Empty text means no arguments. Checks: a JSON object, every required argument present, no
    unknown one (when the schema is closed), and each value of the right JSON type (or enum
    member); nested values are not checked. An int given for a number becomes a float, an
    integral float given for an integer becomes an int. Defaults are left to the function.

    Raises:
        ToolArgumentError: with a message the model can act on.
    """
    spec = tool._arguments
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
    missing = [name for name in spec.required if name not in args]
    if missing:
        names = ", ".join(map(repr, missing))
        raise ToolArgumentError(
            f"missing required argument{'s' if len(missing) > 1 else ''} {names}"
        )
    if spec.closed and not spec.known.issuperset(args):
        raise ToolArgumentError(_unknown_message(args, spec.known))
    checks = spec.checks
    for name, value in args.items():
        check = checks.get(name)
        if check is not None:
            args[name] = check.apply(name, value)
    return args


#: The argument error for JSON nested past the parser's recursion limit.
_TOO_DEEP = (
    "arguments are nested too deeply (past the JSON parser's nesting limit); send one JSON "
    "object with less nesting"
)


def _arguments_of(parameters: dict[str, Any]) -> _Arguments:
    """Precompute the required and known names and each property's check."""
    properties: dict[str, Any] = parameters.get("properties") or {}
    checks = {name: check for name, schema in properties.items() if (check := _check_of(schema))}
    return _Arguments(
        required=tuple(parameters.get("required") or ()),
        known=frozenset(properties),
        closed=parameters.get("additionalProperties", True) is False,
        checks=checks,
    )


def _check_of(schema: Any) -> _Check | None:
    """The check of one property schema, or None when it accepts any JSON value."""
    if not isinstance(schema, dict):
        return None
    members = schema.get("anyOf") or schema.get("oneOf") or [schema]
    alternatives = []
    expected: list[str] = []
    allowed: list[Any] = []
    for member in members:
        if not isinstance(member, dict):
            return None
        kind = member.get("type")
        names = [kind] if isinstance(kind, str) else list(kind or ())
        values = member.get("enum") if "enum" in member else None
        if "const" in member:
            values = [member["const"]]
        if not names and values is None:
            return None
        expected.extend(name for name in names if name not in expected)
        allowed.extend(values or ())
        accepted = set(names) | ({"integer"} if "number" in names else set())
        alternatives.append((frozenset(accepted) if names else None, _members(values)))
    return _Check(
        alternatives=tuple(alternatives),
        expected=tuple(expected),
        allowed=tuple(allowed),
        int_to_float="number" in expected and "integer" not in expected,
        float_to_int="integer" in expected and "number" not in expected,
    )


def _members(values: list[Any] | None) -> frozenset[Any] | tuple[Any, ...] | None:
    """Enum values as (JSON type, value) pairs, so that ``1`` never matches ``true``."""
    if values is None:
        return None
    pairs = tuple((JSON_TYPES.get(type(value), "other"), value) for value in values)
    try:
        return frozenset(pairs)
    except TypeError:  # an unhashable enum value (a list or an object): compare by equality
        return pairs


def _is_member(kind: str, value: Any, members: frozenset[Any] | tuple[Any, ...]) -> bool:
    """Whether (kind, value) is one of the enum members."""
    try:
        return (kind, value) in members
    except TypeError:  # an array or object looked up among hashable members
        return False


def _unknown_message(args: dict[str, Any], known: frozenset[str]) -> str:
    """Name the unknown arguments and the ones the tool takes."""
    unknown = ", ".join(repr(name) for name in args if name not in known)
    takes = ", ".join(map(repr, sorted(known))) if known else "no arguments"
    return f"unknown argument {unknown}; this tool takes {takes}"


def _show(value: Any) -> str:
    """A value as the model wrote it (JSON), cut short, without lone surrogates."""
    text = cleaned(json.dumps(value, ensure_ascii=False), "tool_result", "argument_error")
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


def _caller(fn: Callable[..., Any], *, in_thread: bool) -> Callable[..., Awaitable[Any]]:
    """Wrap ``fn`` as an async function of keyword arguments, converting typed arguments."""
    is_async = _is_async(fn)
    structured = {
        name: hint for name, hint in parameter_hints(fn).items() if needs_structuring(hint)
    }
    wants_key = wants_idempotency_key(fn)
    key_default = _key_default(fn) if wants_key else None
    if is_async and not structured and not wants_key:
        return fn

    async def call(**kwargs: Any) -> Any:
        for name, hint in structured.items():
            if name in kwargs:
                kwargs[name] = _structure(name, kwargs[name], hint)
        if wants_key:  # the runtime's key, whatever the arguments say
            context = _CURRENT_CALL.get()
            kwargs[IDEMPOTENCY_KEY] = key_default if context is None else context.idempotency_key
        if is_async:
            return await fn(**kwargs)
        if in_thread:
            result = await _in_daemon_thread(functools.partial(fn, **kwargs))
        else:
            result = fn(**kwargs)
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
            result = await result
        return result

    return call


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


def _key_default(fn: Callable[..., Any]) -> Any:
    """What the ``idempotency_key`` parameter gets outside a tool call: its default, or ""."""
    default = inspect.signature(fn).parameters[IDEMPOTENCY_KEY].default
    return "" if default is inspect.Parameter.empty else default


def _structure(name: str, value: Any, hint: Any) -> Any:
    """Convert one JSON argument to its annotated type, or explain why it does not fit."""
    try:
        return _CONVERTER.structure(value, hint)
    except Exception as exc:
        problems = "; ".join(cattrs.transform_error(exc, path=name))
        raise ToolArgumentError(f"argument {name!r} is invalid: {problems}") from exc

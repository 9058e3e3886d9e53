"""Tool parameters through pydantic: the validator of the model's arguments and the JSON Schema
the model is shown, from a function's signature and docstring or from a server's JSON Schema.

A function's parameters become one closed ``TypedDict`` that pydantic validates (strictly, from
JSON) and describes; :func:`openai_schema` is the one change made to pydantic's JSON Schema.
Pydantic knows neither attrs classes nor, before Python 3.12, ``typing.TypedDict``: both are
rebuilt as closed ``typing_extensions.TypedDict`` records (an attrs instance made from the valid
record), so that they validate and show alike.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin

import attrs
import pydantic
import pydantic_core
from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter
from typing_extensions import TypedDict, is_typeddict

from autonomous._errors import ConfigurationError

#: The JSON Schema type name of each Python type ``json.loads`` produces (by exact type: a bool
#: is a boolean, never an integer).
JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
    type(None): "null",
}
#: What checks a JSON Schema ``type`` at the top level of a server's tool (it checks deeper).
_HINTS: dict[str, Any] = {name: kind for kind, name in JSON_TYPES.items()}
#: Validates the arguments of one tool call: a dict in, the dict of converted values out.
Arguments = TypeAdapter[dict[str, Any]]

#: The parameter a tool function declares to get its call's idempotency key from the runtime.
IDEMPOTENCY_KEY = "idempotency_key"
_KINDS_WITH_SCHEMA = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_ARGS_SECTIONS = frozenset(
    {"Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"}
)
_SECTION = re.compile(
    r"(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|"
    r"Returns?|Yields?|Raises|Examples?|Notes?|Attributes|See Also|Warnings?|Todo|References)"
    r"\s*:\s*"
)
_ARG_ENTRY = re.compile(r"\*{0,2}(?P<name>[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:(?P<text>.*)")
#: Schema keys whose value is data, not a schema: copied as they are.
_DATA_KEYS = frozenset({"default", "enum", "const", "examples"})


class _Unsupported(Exception):
    """A type hint with no JSON form; the caller names the function and parameter."""


def function_arguments(fn: Callable[..., Any]) -> tuple[Arguments, dict[str, Any]]:
    """Return the validator of ``fn``'s arguments and the ``parameters`` schema the model sees.

    Every parameter the model fills is an item of a closed object: required when it has no
    default, its default shown when it is JSON. Its description comes from
    ``Annotated[X, "text"]``, else from the docstring's Google-style ``Args:`` section.
    Keywords bound by ``functools.partial`` are hidden from the model, and so is an
    ``idempotency_key`` parameter: the runtime fills it with the call's key.

    Raises:
        ConfigurationError: a parameter has no annotation, is ``*args``/``**kwargs`` or
            positional-only, or has a type with no JSON form.
    """
    label = _label(fn)
    docs = _arg_docs(_doc_of(fn))
    items: dict[str, Any] = {}
    for param, declared in _parameters(fn, label):
        text = _annotated_text(declared) or docs.get(param.name)
        try:
            hint = _pydantic_hint(declared)
            openai_schema(TypeAdapter(hint).json_schema())  # refused here, by name
        except (_Unsupported, pydantic.PydanticUserError, TypeError, NameError) as exc:
            reason = exc if isinstance(exc, _Unsupported) else declared
            raise ConfigurationError(
                f"cannot build a tool from {label}: parameter {param.name!r} has a type with no "
                f"JSON form ({reason}); use str, int, float, bool, None, list, tuple, dict, "
                "Literal, an Enum, an attrs class, a TypedDict or a pydantic model"
            ) from None
        items[param.name] = _item(hint, param.default, text, param.default is param.empty)
    arguments: Arguments = TypeAdapter(_record("arguments", items))
    return arguments, {"required": [], **openai_schema(arguments.json_schema())}


def json_schema_for(fn: Callable[..., Any]) -> dict[str, Any]:
    """Return the OpenAI function-calling ``parameters`` object for ``fn`` (see
    :func:`function_arguments`)."""
    return function_arguments(fn)[1]


def openai_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's JSON Schema as the model is shown it: self-contained and without titles.

    Each ``$ref`` is replaced by its definition (the sibling keys, a default or a description,
    kept): the schema stands alone, as a small model's grammar builder wants it, and a type
    that contains itself is refused instead of expanded forever. Pydantic's ``title`` keys go:
    each repeats its property's name and costs tokens on every call. An ``anyOf`` of bare
    types (``int | None``) is written as the shorter type list, ``["integer", "null"]``. An
    array with no item type at all (``tuple[()]``) is given ``items: {}``, as a bare ``list``
    has: OpenAI refuses an array schema without ``items``.
    """
    definitions = schema.get("$defs", {})

    def inline(node: Any, inside: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [inline(item, inside) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name in inside:
                raise _Unsupported(f"{name} contains itself")
            rest = {key: value for key, value in node.items() if key != "$ref"}
            return inline({**definitions[name], **rest}, inside | {name})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DATA_KEYS:
                out[key] = value
            elif key == "properties":
                out[key] = {name: inline(sub, inside) for name, sub in value.items()}
            elif key not in ("title", "$defs"):
                out[key] = inline(value, inside)
        if out.get("anyOf") and all(member.keys() == {"type"} for member in out["anyOf"]):
            kinds = [member["type"] for member in out.pop("anyOf")]
            out = {"type": kinds, **out}
        if out.get("type") == "array" and "items" not in out and "prefixItems" not in out:
            out["items"] = {}  # an empty tuple: OpenAI refuses an array schema without items
        return out

    result: dict[str, Any] = inline(schema, frozenset())
    return result


def schema_arguments(parameters: dict[str, Any]) -> Arguments:
    """Return the validator of arguments for a tool given as JSON Schema (an MCP server's, the
    runtime's own): the required and the known names, and each property's JSON type and enum
    at the top level. A server checks deeper itself."""
    properties = parameters.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    listed = parameters.get("required")
    required = [n for n in listed if isinstance(n, str)] if isinstance(listed, list) else []
    items = {
        name: (Required if name in required else NotRequired)[_json_hint(properties.get(name))]
        for name in dict.fromkeys([*properties, *required])
    }
    closed = parameters.get("additionalProperties", True) is False
    return TypeAdapter(_record("arguments", items, closed=closed))


def _json_hint(schema: Any) -> Any:
    """The hint that checks one property schema's top level (``Any`` when it says nothing)."""
    if not isinstance(schema, dict):
        return Any
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        return Annotated[Any, AfterValidator(functools.partial(_one_of, list(values)))]
    members = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(members, list):
        hints = [_json_hint(member) for member in members]
    else:
        kinds = schema.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
        hints = [_HINTS[kind] for kind in kinds if kind in _HINTS]
    return Any if not hints or Any in hints else Union[tuple(hints)]  # noqa: UP007


def _one_of(values: list[Any], value: Any) -> Any:
    """``value`` if it is one of ``values`` by JSON type too (``true`` is not ``1``)."""
    if (type(value), value) not in [(type(member), member) for member in values]:
        raise ValueError("not one of the allowed values")
    return value


def _pydantic_hint(hint: Any, seen: frozenset[type] = frozenset()) -> Any:
    """``hint`` with every attrs class and TypedDict in it rebuilt as a record pydantic takes."""
    if isinstance(hint, type) and (attrs.has(hint) or is_typeddict(hint)):
        return _class_record(hint, seen)
    args = get_args(hint)
    origin = get_origin(hint)
    if not args or origin is Literal:
        return hint
    new = tuple(_pydantic_hint(arg, seen) for arg in args)
    if new == args:
        return hint
    if origin is Union or origin is types.UnionType:
        return Union[new]  # noqa: UP007
    return origin[new if len(new) > 1 else new[0]]


def _class_record(cls: type, seen: frozenset[type]) -> Any:
    """An attrs class (init fields by alias, an instance made once valid) or a TypedDict as a
    closed record."""
    if cls in seen:
        raise _Unsupported(f"{cls.__qualname__} contains itself")
    seen |= {cls}
    hints = typing.get_type_hints(cls, include_extras=True)
    items: dict[str, Any] = {}
    if attrs.has(cls):
        for field in attrs.fields(cls):
            if field.init:
                hint = _pydantic_hint(hints.get(field.name, Any), seen)
                text = field.metadata.get("description")
                required = field.default is attrs.NOTHING
                items[field.alias or field.name] = _item(hint, field.default, text, required)
        made = AfterValidator(functools.partial(_instance, cls))
        return Annotated[_record(cls.__name__, items), made]
    for name, hint in hints.items():
        # An explicit Required/NotRequired wins: Python 3.11 cannot see one in a string
        # annotation when it computes __required_keys__.
        kind = get_origin(hint)
        if kind is Required or kind is NotRequired:
            items[name] = kind[_pydantic_hint(get_args(hint)[0], seen)]
        else:
            kind = Required if name in getattr(cls, "__required_keys__", ()) else NotRequired
            items[name] = kind[_pydantic_hint(hint, seen)]
    return _record(cls.__name__, items)


def _instance(cls: type, record: dict[str, Any]) -> Any:
    """The attrs instance of a valid record; what its own validators refuse is a ValueError,
    which pydantic reports as the value's error."""
    try:
        return cls(**record)
    except Exception as exc:
        raise ValueError(str(exc) or type(exc).__name__) from exc


def _record(name: str, items: dict[str, Any], *, closed: bool = True) -> type:
    """A ``TypedDict`` of ``items`` (any string keys), closed unless told otherwise."""
    record: Any = typing.cast(Any, TypedDict)(name, items)
    record.__pydantic_config__ = ConfigDict(extra="forbid" if closed else "allow")
    return typing.cast(type, record)


def _item(hint: Any, default: Any, text: str | None, required: bool) -> Any:
    """One item of a record: required without a default, else its default shown if JSON."""
    if required:
        return Required[Annotated[hint, Field(description=text)]]
    try:
        pydantic_core.to_jsonable_python(default)
    except pydantic_core.PydanticSerializationError:
        return NotRequired[Annotated[hint, Field(description=text)]]
    return NotRequired[Annotated[hint, Field(default, description=text)]]


def _annotated_text(hint: Any) -> str | None:
    """The first non-blank string of ``Annotated[X, "text", ...]``, as one line."""
    if get_origin(hint) is not Annotated:
        return None
    texts = [" ".join(item.split()) for item in hint.__metadata__ if isinstance(item, str)]
    return next((text for text in texts if text), None)


def description_from_doc(fn: Callable[..., Any]) -> str:
    """Return the docstring's text before its first section (``Args:``, ``Returns:`` ...).

    The text is cleaned (``inspect.cleandoc``) and joined into one paragraph: every run of
    whitespace, line breaks included, becomes one space. No docstring gives ``""``.
    """
    doc = _doc_of(fn)
    if not doc:
        return ""
    lines: list[str] = []
    for line in doc.splitlines():
        if _SECTION.fullmatch(line):
            break
        lines.append(line)
    return " ".join(" ".join(lines).split())


def _parameters(fn: Callable[..., Any], label: str) -> list[tuple[inspect.Parameter, Any]]:
    """Pair each parameter the model fills with its type hint, refusing those it cannot fill."""
    target, bound = unwrap_partial(fn)
    try:
        signature = inspect.signature(fn)
        hints = _type_hints(target)
    except (TypeError, ValueError, NameError) as exc:
        raise ConfigurationError(f"cannot build a tool from {label}: {exc}") from exc
    result: list[tuple[inspect.Parameter, Any]] = []
    for param in signature.parameters.values():
        if param.name in bound:
            continue
        if param.name == IDEMPOTENCY_KEY and param.kind in _KINDS_WITH_SCHEMA:
            continue  # filled by the runtime, never by the model
        if param.kind not in _KINDS_WITH_SCHEMA:
            raise ConfigurationError(
                f"cannot build a tool from {label}: parameter {param.name!r} is "
                f"{param.kind.description}; the model passes named arguments only, so declare "
                "each one as a regular or keyword-only parameter"
            )
        if param.name not in hints:
            raise ConfigurationError(
                f"cannot build a tool from {label}: parameter {param.name!r} has no type "
                f"annotation; annotate it (for example `{param.name}: str`) so the model knows "
                "what to send"
            )
        result.append((param, hints[param.name]))
    return result


def wants_idempotency_key(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` declares a regular or keyword-only ``idempotency_key`` parameter that no
    ``functools.partial`` binds (the runtime then passes the call's key to it)."""
    _, bound = unwrap_partial(fn)
    try:
        param = inspect.signature(fn).parameters.get(IDEMPOTENCY_KEY)
    except (TypeError, ValueError):
        return False
    return param is not None and param.kind in _KINDS_WITH_SCHEMA and IDEMPOTENCY_KEY not in bound


def unwrap_partial(fn: Any) -> tuple[Any, frozenset[str]]:
    """Return the callable under any ``functools.partial`` layers and the keywords they bind."""
    bound: set[str] = set()
    while isinstance(fn, functools.partial):
        bound.update(fn.keywords)
        fn = fn.func
    return fn, frozenset(bound)


def _type_hints(target: Any) -> dict[str, Any]:
    """Resolve the annotations of a function, a class's ``__init__`` or an object's ``__call__``."""
    if isinstance(target, type):
        target = target.__init__  # type: ignore[misc]
    elif not inspect.isroutine(target):
        target = type(target).__call__
    return typing.get_type_hints(target, include_extras=True)


def _label(fn: Any) -> str:
    """Name a callable in error messages."""
    target, _ = unwrap_partial(fn)
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{name!s}()"


def _doc_of(fn: Any) -> str | None:
    """Return the cleaned docstring of a callable (an object's ``__call__``, else its class)."""
    target, _ = unwrap_partial(fn)
    if inspect.isroutine(target) or isinstance(target, type):
        return inspect.getdoc(target)
    call_doc = inspect.getdoc(type(target).__call__) if callable(target) else None
    return call_doc or inspect.getdoc(type(target))


def _arg_docs(doc: str | None) -> dict[str, str]:
    """Parse the Google-style ``Args:`` section: ``name (type): text`` plus indented lines."""
    if not doc:
        return {}
    found: dict[str, list[str]] = {}
    in_args = False
    entry_indent: int | None = None
    current: str | None = None
    for line in doc.splitlines():
        header = _SECTION.fullmatch(line)
        if header:
            in_args, entry_indent, current = header.group(1) in _ARGS_SECTIONS, None, None
            continue
        stripped = line.strip()
        if not in_args or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            in_args = False
            continue
        if entry_indent is None:
            entry_indent = indent
        entry = _ARG_ENTRY.fullmatch(stripped) if indent <= entry_indent else None
        if entry:
            current = entry["name"]
            found[current] = [entry["text"].strip()]
        elif current is not None:
            found[current].append(stripped)
    return {name: " ".join(part for part in parts if part) for name, parts in found.items()}

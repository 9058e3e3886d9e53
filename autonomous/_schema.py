"""JSON Schema for a tool's parameters, from a function's type hints and docstring."""

from __future__ import annotations

import enum
import functools
import inspect
import json
import re
import types
import typing
from collections import abc
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin

import attrs

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
#: JSON Schema type names of the Python scalars.
_SCALARS: dict[Any, str] = {t: n for t, n in JSON_TYPES.items() if n not in ("array", "object")}
_ARRAYS: frozenset[Any] = frozenset(
    {list, tuple, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Set, abc.MutableSet}
    | {abc.Collection, abc.Iterable}
)
_SETS: frozenset[Any] = frozenset({set, frozenset, abc.Set, abc.MutableSet})
_OBJECTS: frozenset[Any] = frozenset({dict, abc.Mapping, abc.MutableMapping})
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
_NO_DEFAULT = object()


class _Unsupported(Exception):
    """A type hint with no JSON Schema form; the caller names the function and parameter."""


def json_schema_for(fn: Callable[..., Any]) -> dict[str, Any]:
    """Return the OpenAI function-calling ``parameters`` object for ``fn``'s parameters.

    The mapping:

    ==================================  ===================================================
    Python hint                         JSON Schema
    ==================================  ===================================================
    ``str`` ``int`` ``float`` ``bool``  ``string`` ``integer`` ``number`` ``boolean``
    ``None``                            ``null``
    ``Any``                             ``{}`` (no constraint)
    ``X | Y``, ``Optional[X]``          a ``type`` list, or ``anyOf`` when that cannot say it
    ``list[X]``, ``Sequence[X]``        ``array`` with ``items`` (``set[X]``: ``uniqueItems``)
    ``tuple[X, ...]``, ``tuple[X, Y]``  ``array`` with ``items`` / fixed-size ``prefixItems``
    ``dict[str, X]``, ``Mapping[...]``  ``object`` with ``additionalProperties``
    ``Literal[...]``, an ``Enum``       ``enum`` of the literal values / the members' values
    an attrs class, a ``TypedDict``     a nested ``object`` (attrs fields by their init alias)
    ``Annotated[X, "text"]``            ``X`` with ``"description": "text"``
    ==================================  ===================================================

    A parameter with a default is optional and its default is shown (when it is JSON); one
    without is required, ``X | None`` included. A parameter's description comes from
    ``Annotated``, else from the docstring's Google-style ``Args:`` section. Keywords bound by
    ``functools.partial`` are hidden from the model, and so is an ``idempotency_key``
    parameter: the runtime fills it with the call's key.

    Args:
        fn: a function, bound method, ``functools.partial`` or callable object.

    Raises:
        ConfigurationError: a parameter has no annotation, is ``*args``/``**kwargs`` or
            positional-only, or has a type with no JSON form.
    """
    label = _label(fn)
    docs = _arg_docs(_doc_of(fn))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param, hint in _parameters(fn, label):
        try:
            prop = dict(type_schema(hint))
        except _Unsupported as exc:
            raise ConfigurationError(
                f"cannot build a tool from {label}: parameter {param.name!r} has a type with no "
                f"JSON form ({exc}); use str, int, float, bool, None, list, tuple, dict[str, ...], "
                "Literal, an Enum, an attrs class or a TypedDict"
            ) from None
        if "description" not in prop and param.name in docs:
            prop["description"] = docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        else:
            default = _json_value(param.default)
            if default is not _NO_DEFAULT:
                prop["default"] = default
        properties[param.name] = prop
    return _object_schema(properties, required)


def parameter_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Return the type hint of each parameter the model fills, by name, in signature order.

    Raises the same ``ConfigurationError`` as :func:`json_schema_for` for a parameter the model
    cannot fill (no annotation, ``*args``/``**kwargs``, positional-only).
    """
    return {param.name: hint for param, hint in _parameters(fn, _label(fn))}


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


def type_schema(tp: Any, seen: frozenset[type] = frozenset()) -> dict[str, Any]:
    """Return the JSON Schema of one type hint (see the module docstring for the mapping).

    ``seen`` holds the classes being expanded, so that a class containing itself is refused.
    Raises ``_Unsupported`` (private) for a hint with no JSON form.
    """
    if tp is Any:
        return {}
    if tp is None:
        return {"type": "null"}
    origin = get_origin(tp)
    if origin is Annotated:
        return _annotated_schema(tp, seen)
    if origin is Literal:
        return _enum_schema(get_args(tp), "Literal")
    if origin is Union or origin is types.UnionType:
        return _union_schema([type_schema(arg, seen) for arg in get_args(tp)])
    if origin is Required or origin is NotRequired:
        return type_schema(get_args(tp)[0], seen)
    if origin is not None:
        return _generic_schema(origin, get_args(tp), seen)
    if isinstance(tp, typing.NewType):
        return type_schema(tp.__supertype__, seen)
    if isinstance(tp, type):
        return _class_schema(tp, seen)
    raise _Unsupported(repr(tp))


def needs_structuring(tp: Any) -> bool:
    """Tell whether a value parsed from JSON must be converted to match the hint ``tp``.

    True when the hint contains an Enum, an attrs class, a tuple or a set anywhere: JSON gives
    plain values, lists and dicts, which the function would otherwise receive as they are.
    """
    origin = get_origin(tp)
    if origin is Annotated or origin is Required or origin is NotRequired:
        return needs_structuring(get_args(tp)[0])
    if origin is Literal:
        return False
    if origin is tuple or origin in _SETS:
        return True
    if origin is not None:
        return any(needs_structuring(arg) for arg in get_args(tp) if arg is not Ellipsis)
    if isinstance(tp, typing.NewType):
        return needs_structuring(tp.__supertype__)
    if not isinstance(tp, type):
        return False
    if tp is tuple or tp in _SETS or issubclass(tp, enum.Enum) or attrs.has(tp):
        return True
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        return any(needs_structuring(hint) for hint in hints.values())
    return False


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


#: The parameter a tool function declares to get its call's idempotency key from the runtime.
IDEMPOTENCY_KEY = "idempotency_key"


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


def _object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A closed JSON object with the given properties."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _annotated_schema(tp: Any, seen: frozenset[type]) -> dict[str, Any]:
    """``Annotated[X, "text", ...]``: X's schema with the first string as its description."""
    base, *metadata = get_args(tp)
    schema = type_schema(base, seen)
    text = next((item for item in metadata if isinstance(item, str)), None)
    if text and text.strip():
        schema = {**schema, "description": " ".join(inspect.cleandoc(text).split())}
    return schema


def _json_types(values: Iterable[Any], what: str) -> list[str]:
    """The distinct JSON types of some literal values, refusing values JSON cannot carry."""
    names: list[str] = []
    for value in values:
        name = _SCALARS.get(type(value))
        if name is None:
            raise _Unsupported(f"{what} value {value!r} is not a JSON string, number or boolean")
        if name not in names:
            names.append(name)
    return names


def _enum_schema(values: tuple[Any, ...] | list[Any], what: str) -> dict[str, Any]:
    """An ``enum`` of JSON scalars, with their type (or type list)."""
    names = _json_types(values, what)
    schema: dict[str, Any] = {"type": names[0] if len(names) == 1 else names} if names else {}
    schema["enum"] = list(values)
    return schema


def _union_schema(members: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge simple members into one ``type`` list (and ``enum``); otherwise use ``anyOf``."""
    if any(not member for member in members):
        return {}
    if any(not set(member) <= {"type", "enum"} for member in members):
        return {"anyOf": members}
    with_enum = [member for member in members if "enum" in member]
    without = [member for member in members if "enum" not in member]
    if with_enum and any(member != {"type": "null"} for member in without):
        return {"anyOf": members}
    schema: dict[str, Any] = {}
    if all("type" in member for member in members):
        names: list[str] = []
        for member in members:
            kind = member["type"]
            for name in [kind] if isinstance(kind, str) else kind:
                if name not in names:
                    names.append(name)
        schema["type"] = names[0] if len(names) == 1 else names
    if with_enum:
        values = [value for member in with_enum for value in member["enum"]]
        schema["enum"] = [*values, None] if without and None not in values else values
    return schema


def _generic_schema(origin: Any, args: tuple[Any, ...], seen: frozenset[type]) -> dict[str, Any]:
    """``list[X]``, ``tuple[...]``, ``set[X]``, ``dict[str, X]`` and their abstract forms."""
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0], seen)}
        items = [type_schema(arg, seen) for arg in args if arg != ()]
        size = len(items)
        return {"type": "array", "prefixItems": items, "minItems": size, "maxItems": size}
    if origin in _ARRAYS:
        # OpenAI refuses an array schema without "items": a bare list takes any item.
        schema: dict[str, Any] = {"type": "array", "items": {}}
        if args:
            schema["items"] = type_schema(args[0], seen)
        if origin in _SETS:
            schema["uniqueItems"] = True
        return schema
    if origin in _OBJECTS:
        key, value = args
        if key is not str and key is not Any:
            raise _Unsupported(f"mapping keys of type {key!r}: JSON object keys are strings")
        values = type_schema(value, seen)
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
    raise _Unsupported(repr(origin))


def _class_schema(cls: type, seen: frozenset[type]) -> dict[str, Any]:
    """Scalars, enums, attrs classes, TypedDicts and bare containers."""
    scalar = _SCALARS.get(cls)
    if scalar is not None:
        return {"type": scalar}
    if issubclass(cls, enum.Enum):
        return _enum_schema([member.value for member in cls], f"{cls.__name__} member")
    if attrs.has(cls) or typing.is_typeddict(cls):
        if cls in seen:
            raise _Unsupported(f"{cls.__qualname__} contains itself")
        return _record_schema(cls, seen | {cls})
    if cls in _ARRAYS:
        bare: dict[str, Any] = {"type": "array", "items": {}}  # OpenAI needs "items"
        return {**bare, "uniqueItems": True} if cls in _SETS else bare
    if cls in _OBJECTS:
        return {"type": "object"}
    raise _Unsupported(cls.__qualname__)


def _record_schema(cls: type, seen: frozenset[type]) -> dict[str, Any]:
    """A nested object from an attrs class (init fields by alias) or a TypedDict."""
    hints = typing.get_type_hints(cls, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    if typing.is_typeddict(cls):
        for name, hint in hints.items():
            properties[name] = type_schema(hint, seen)
        required = [name for name, hint in hints.items() if _typeddict_requires(cls, name, hint)]
        return _object_schema(properties, required)
    for field in attrs.fields(cls):
        if not field.init:
            continue
        hint = hints.get(field.name, field.type)
        if hint is None:
            raise _Unsupported(f"{cls.__qualname__}.{field.name} has no annotation")
        prop = dict(type_schema(hint, seen))
        if "description" not in prop and field.metadata.get("description"):
            prop["description"] = str(field.metadata["description"])
        name = field.alias or field.name
        if field.default is attrs.NOTHING:
            required.append(name)
        elif (default := _json_value(field.default)) is not _NO_DEFAULT:
            prop["default"] = default
        properties[name] = prop
    return _object_schema(properties, required)


def _typeddict_requires(cls: type, name: str, hint: Any) -> bool:
    """Whether a TypedDict key is required; an explicit Required/NotRequired hint wins.

    Python 3.11 cannot see those in string annotations when it computes ``__required_keys__``.
    """
    origin = get_origin(hint)
    if origin is Required or origin is NotRequired:
        return origin is Required
    return name in getattr(cls, "__required_keys__", ())


def _json_value(value: Any) -> Any:
    """A default as JSON (an Enum by its value, a tuple as a list), or ``_NO_DEFAULT``."""
    if isinstance(value, enum.Enum):
        value = value.value
    elif isinstance(value, tuple | frozenset | set):
        value = [item.value if isinstance(item, enum.Enum) else item for item in value]
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return _NO_DEFAULT
    return value

"""Specification of the tool layer: schemas, Tool, function_tool, arguments and results."""

from __future__ import annotations

import enum
import functools
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import anyio
import anyio.to_thread
import attrs
import pydantic
import pytest

from autonomous._errors import ConfigurationError, TurnError
from autonomous._tools._schema import description_from_doc, json_schema_for
from autonomous._tools._tool_result import format_error, format_result
from autonomous._tools._tools import (
    Tool,
    ToolArgumentError,
    function_tool,
    parse_arguments,
)
from autonomous.testing._rules import check_chat_request


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Point:
    x: int
    _label: str = "origin"


@attrs.frozen
class Node:
    child: Node | None = None


class Options(TypedDict):
    name: str
    size: NotRequired[int]


def _positive(_span: Span, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise TypeError(f"{attribute.name} must be positive")


@attrs.frozen
class Span:
    high: int = attrs.field(validator=_positive)


class Window(pydantic.BaseModel):
    start: datetime
    hours: int = 1


def prop(fn: Any, name: str) -> dict[str, Any]:
    """The schema of one parameter of ``fn``."""
    schema: dict[str, Any] = json_schema_for(fn)["properties"][name]
    return schema


async def _noop(**_: Any) -> str:
    return "ok"


def rejection(tool: Tool, raw: str) -> str:
    """The message of the ToolArgumentError that ``parse_arguments`` raises."""
    with pytest.raises(ToolArgumentError) as info:
        parse_arguments(tool, raw)
    return str(info.value)


def make_tool(parameters: dict[str, Any], name: str = "t") -> Tool:
    return Tool(name=name, description="A test tool.", parameters=parameters, fn=_noop)


class TestJsonSchemaFor:
    def test_top_level_shape(self) -> None:
        """The schema is a closed object listing properties and the required names."""

        def f(a: str, b: int = 1) -> None: ...

        assert {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer", "default": 1}},
            "required": ["a"],
            "additionalProperties": False,
        } == json_schema_for(f)

    @pytest.mark.parametrize(
        ("hint", "expected"),
        [
            (str, {"type": "string"}),
            (int, {"type": "integer"}),
            (float, {"type": "number"}),
            (bool, {"type": "boolean"}),
            (None, {"type": "null"}),
            (Any, {}),
        ],
    )
    def test_scalars(self, hint: Any, expected: dict[str, Any]) -> None:
        """Each scalar type maps to its JSON type, and Any to no constraint."""

        def f(x: Any) -> None: ...

        f.__annotations__ = {"x": hint}
        assert expected == prop(f, "x")

    def test_optional_is_a_nullable_type_list(self) -> None:
        """``X | None`` is a type list with null."""

        def f(x: int | None) -> None: ...

        assert {"type": ["integer", "null"]} == prop(f, "x")

    def test_optional_without_default_is_required(self) -> None:
        """``X | None`` without a default must still be sent (as null if need be)."""

        def f(x: int | None, y: int | None = None) -> None: ...

        assert ["x"] == json_schema_for(f)["required"]

    def test_union_of_complex_members_uses_any_of(self) -> None:
        """A union that a type list cannot say becomes anyOf."""

        def f(x: list[int] | None) -> None: ...

        assert {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]} == (
            prop(f, "x")
        )

    def test_sequences(self) -> None:
        """list, Sequence and homogeneous tuples are arrays with items."""

        def f(a: list[str], b: Sequence[float], c: tuple[int, ...]) -> None: ...

        assert {"type": "array", "items": {"type": "string"}} == prop(f, "a")
        assert {"type": "array", "items": {"type": "number"}} == prop(f, "b")
        assert {"type": "array", "items": {"type": "integer"}} == prop(f, "c")

    def test_fixed_tuple(self) -> None:
        """A fixed tuple is an array of that exact size with prefixItems."""

        def f(a: tuple[int, str]) -> None: ...

        assert {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        } == prop(f, "a")

    def test_every_array_has_items_as_openai_requires(self) -> None:
        """An empty tuple (no item type at all) still shows ``items``: OpenAI refuses an array
        schema without it, and the scripted server refuses what OpenAI refuses."""

        def f(a: tuple[()], b: list) -> None:  # type: ignore[type-arg]
            """Take nothing, twice."""

        assert {"type": "array", "items": {}, "minItems": 0, "maxItems": 0} == prop(f, "a")
        tool = function_tool(f)
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "go"}],
            "tools": [tool.spec()],
        }
        assert check_chat_request(body) is None

    def test_set_has_unique_items(self) -> None:
        """A set is an array of unique items."""

        def f(a: set[str]) -> None: ...

        assert {"type": "array", "items": {"type": "string"}, "uniqueItems": True} == prop(f, "a")

    def test_dict_of_str(self) -> None:
        """``dict[str, X]`` is an object whose values follow X."""

        def f(a: dict[str, int], b: dict[str, Any]) -> None: ...

        assert {"type": "object", "additionalProperties": {"type": "integer"}} == prop(f, "a")
        assert {"type": "object", "additionalProperties": True} == prop(f, "b")

    def test_literal(self) -> None:
        """A Literal is an enum of its values, with their JSON type when they share one."""

        def f(a: Literal["r", "w"], b: Literal[1, "x"]) -> None: ...

        assert {"type": "string", "enum": ["r", "w"]} == prop(f, "a")
        assert {"enum": [1, "x"]} == prop(f, "b")

    def test_optional_literal_admits_null(self) -> None:
        """``Literal[...] | None`` is anyOf the enum and null."""

        def f(a: Literal["r", "w"] | None = None) -> None: ...

        expected = {"anyOf": [{"type": "string", "enum": ["r", "w"]}, {"type": "null"}]}
        assert {**expected, "default": None} == prop(f, "a")

    def test_enum_classes(self) -> None:
        """An Enum is an enum of its members' values, and a default member shows its value."""

        def f(a: Color = Color.BLUE, b: Level = Level.LOW) -> None: ...

        assert {"type": "string", "enum": ["red", "blue"], "default": "blue"} == prop(f, "a")
        assert {"type": "integer", "enum": [1, 2], "default": 1} == prop(f, "b")

    def test_attrs_class(self) -> None:
        """An attrs class is a nested closed object keyed by init alias."""

        def f(p: Point) -> None: ...

        assert {
            "type": "object",
            "properties": {
                "x": {"type": "integer"},
                "label": {"type": "string", "default": "origin"},
            },
            "required": ["x"],
            "additionalProperties": False,
        } == prop(f, "p")

    def test_typed_dict(self) -> None:
        """A TypedDict is a nested closed object whose NotRequired keys are optional."""

        def f(o: Options) -> None: ...

        assert {
            "type": "object",
            "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
            "required": ["name"],
            "additionalProperties": False,
        } == prop(f, "o")

    def test_annotated_description(self) -> None:
        """A string in Annotated becomes the property's description."""

        def f(path: Annotated[str, "File to read."]) -> None: ...

        assert {"type": "string", "description": "File to read."} == prop(f, "path")

    def test_docstring_descriptions(self) -> None:
        """Google-style Args entries, continuation lines included, describe the parameters."""

        def f(path: str, mode: str = "r") -> None:
            """Read a file.

            Args:
                path: The file
                    to read.
                mode (str): How to open it.

            Returns:
                Nothing.
            """

        assert "The file to read." == prop(f, "path")["description"]
        assert "How to open it." == prop(f, "mode")["description"]

    def test_annotated_beats_docstring(self) -> None:
        """An Annotated description wins over the docstring's."""

        def f(path: Annotated[str, "From Annotated."]) -> None:
            """Read.

            Args:
                path: From the docstring.
            """

        assert "From Annotated." == prop(f, "path")["description"]

    def test_unjsonable_default_is_omitted(self) -> None:
        """A default with no JSON form makes the parameter optional without showing it."""
        sentinel = object()

        def f(a: Any = sentinel) -> None: ...

        assert ({}, []) == (prop(f, "a"), json_schema_for(f)["required"])

    def test_partial_hides_bound_keywords(self) -> None:
        """Keywords bound by functools.partial are not offered to the model."""

        def f(secret: str, query: str) -> None: ...

        schema = json_schema_for(functools.partial(f, secret="s3cr3t"))
        assert (["query"], ["query"]) == (list(schema["properties"]), schema["required"])

    def test_callable_object(self) -> None:
        """A callable object's schema comes from its ``__call__``."""

        class Counter:
            def __call__(self, step: int) -> int:
                return step

        assert {"step": {"type": "integer"}} == json_schema_for(Counter())["properties"]

    def test_unannotated_parameter(self) -> None:
        """A parameter without annotation is a ConfigurationError naming function and parameter."""

        def check_disk(path) -> None: ...

        with pytest.raises(ConfigurationError, match=r"check_disk.*'path' has no type annotation"):
            json_schema_for(check_disk)

    @pytest.mark.parametrize("kind", ["args", "kwargs"])
    def test_var_parameters(self, kind: str) -> None:
        """``*args`` and ``**kwargs`` are refused: the model passes named arguments only."""

        def f(*args: int, **kwargs: int) -> None: ...

        def g(**kwargs: int) -> None: ...

        with pytest.raises(ConfigurationError, match=rf"'{kind}' is variadic"):
            json_schema_for(f if kind == "args" else g)

    def test_positional_only_parameter(self) -> None:
        """A positional-only parameter is refused: tools are called with keyword arguments."""

        def f(a: int, /) -> None: ...

        with pytest.raises(ConfigurationError, match="'a' is positional-only"):
            json_schema_for(f)

    def test_unsupported_type(self) -> None:
        """A type with no JSON form is a ConfigurationError naming the parameter."""

        def f(when: threading.Thread) -> None: ...

        with pytest.raises(ConfigurationError, match="'when' has a type with no JSON form"):
            json_schema_for(f)

    @pytest.mark.anyio
    async def test_non_string_keys(self) -> None:
        """A mapping keyed by int is an object whose keys the function receives as ints."""

        async def f(a: dict[int, str]) -> dict[int, str]:
            """F."""
            return a

        tool = function_tool(f)
        assert {"type": "object", "additionalProperties": {"type": "string"}} == prop(f, "a")
        assert {1: "x"} == await tool.invoke(parse_arguments(tool, '{"a": {"1": "x"}}'))

    def test_recursive_class(self) -> None:
        """A class that contains itself is refused rather than expanded forever."""

        def f(n: Node) -> None: ...

        with pytest.raises(ConfigurationError, match="Node contains itself"):
            json_schema_for(f)


class TestDescriptionFromDoc:
    def test_text_before_sections_as_one_paragraph(self) -> None:
        """The text before Args/Returns is cleaned and joined into one paragraph."""

        def f() -> None:
            """Check the disk
            usage of a host.

            Args:
                nothing: ignored.

            Returns:
                The usage.
            """

        assert "Check the disk usage of a host." == description_from_doc(f)

    def test_no_docstring(self) -> None:
        """A function without docstring has an empty description."""

        def f() -> None: ...

        assert "" == description_from_doc(f)


class TestTool:
    @pytest.mark.parametrize("name", ["", "has space", "dot.name", "x" * 65, "<lambda>"])
    def test_invalid_name(self, name: str) -> None:
        """A name outside ^[a-zA-Z0-9_-]{1,64}$ is a ConfigurationError."""
        with pytest.raises(ConfigurationError, match=r"tool name .* is invalid"):
            make_tool({"type": "object"}, name=name)

    def test_longest_name(self) -> None:
        """A 64-character name of letters, digits, '_' and '-' is accepted."""
        name = "a-b_C9" + "x" * 58
        assert name == make_tool({"type": "object"}, name=name).name

    @pytest.mark.parametrize("description", ["", "   "])
    def test_missing_description(self, description: str) -> None:
        """A tool without description is a ConfigurationError naming it."""
        with pytest.raises(ConfigurationError, match="tool 'probe' has no description"):
            Tool(name="probe", description=description, parameters={"type": "object"}, fn=_noop)

    def test_parameters_must_be_an_object_schema(self) -> None:
        """Parameters that are not an object schema are a ConfigurationError."""
        with pytest.raises(ConfigurationError, match="type 'object'"):
            make_tool({"type": "string"})

    def test_sync_function_refused(self) -> None:
        """A sync function given directly is refused with a pointer to function_tool."""

        def sync(**_: Any) -> None: ...

        with pytest.raises(ConfigurationError, match="function_tool"):
            Tool(name="t", description="d", parameters={"type": "object"}, fn=sync)  # type: ignore[arg-type]

    def test_timeout_must_be_positive(self) -> None:
        """A zero or negative timeout is a ConfigurationError."""
        with pytest.raises(ConfigurationError, match="timeout must be positive"):
            Tool(name="t", description="d", parameters={"type": "object"}, fn=_noop, timeout=0)

    def test_spec_shape(self) -> None:
        """spec() is the OpenAI tools entry."""
        params = {"type": "object", "properties": {}}
        assert {
            "type": "function",
            "function": {"name": "t", "description": "A test tool.", "parameters": params},
        } == make_tool(params).spec()

    def test_spec_is_built_once(self) -> None:
        """spec() returns the same precomputed dict at every call."""
        tool = make_tool({"type": "object"})
        assert tool.spec() is tool.spec()

    def test_defaults(self) -> None:
        """A tool is not read-only, uses the run's timeout, and reports timeouts to the model."""
        tool = make_tool({"type": "object"})
        assert (False, None, False) == (tool.read_only, tool.timeout, tool.fatal_timeout)

    @pytest.mark.anyio
    async def test_invoke_passes_keywords(self) -> None:
        """invoke() awaits fn with the arguments as keywords."""

        async def add(a: int, b: int) -> int:
            return a + b

        tool = Tool(name="add", description="Add.", parameters={"type": "object"}, fn=add)
        assert 5 == await tool.invoke({"a": 2, "b": 3})


class TestFunctionTool:
    def test_plain_call(self) -> None:
        """function_tool(fn) takes the name from __name__ and the description from the doc."""

        def check_disk(path: str) -> str:
            """Report disk usage.

            Args:
                path: Mount point.
            """
            return path

        tool = function_tool(check_disk)
        assert ("check_disk", "Report disk usage.") == (tool.name, tool.description)
        assert ["path"] == tool.parameters["required"]

    def test_bare_decorator(self) -> None:
        """``@function_tool`` turns the function into a Tool."""

        @function_tool
        def ping() -> str:
            """Answer pong."""
            return "pong"

        assert ("ping", "Answer pong.") == (ping.name, ping.description)

    def test_decorator_with_arguments(self) -> None:
        """``@function_tool(...)`` applies the given name, description and options."""

        @function_tool(
            name="p", description="Pings.", read_only=True, timeout=2.5, fatal_timeout=True
        )
        def ping() -> str:
            return "pong"

        assert ("p", "Pings.", True, 2.5, True) == (
            ping.name,
            ping.description,
            ping.read_only,
            ping.timeout,
            ping.fatal_timeout,
        )

    def test_function_without_docstring(self) -> None:
        """A function with neither docstring nor description= is refused."""

        def undocumented() -> None: ...

        with pytest.raises(ConfigurationError, match="tool 'undocumented' has no description"):
            function_tool(undocumented)

    def test_lambda_needs_a_name(self) -> None:
        """A lambda's name is invalid, so it needs name=."""
        with pytest.raises(ConfigurationError, match="'<lambda>' is invalid"):
            function_tool(lambda: None, description="Nothing.")

    def test_partial_takes_the_function_name_and_doc(self) -> None:
        """A partial is named and described after the function it wraps."""

        def search(index: str, query: str) -> str:
            """Search an index."""
            return index + query

        tool = function_tool(functools.partial(search, index="main"))
        assert ("search", "Search an index.", ["query"]) == (
            tool.name,
            tool.description,
            tool.parameters["required"],
        )

    @pytest.mark.anyio
    async def test_sync_tool_runs_in_a_worker_thread(self) -> None:
        """A sync function runs in a thread other than the event loop's."""

        def where() -> int:
            """Thread id."""
            return threading.get_ident()

        assert threading.get_ident() != await function_tool(where).invoke({})

    @pytest.mark.anyio
    async def test_an_abandoned_sync_call_never_holds_the_process(self) -> None:
        """A sync call cancelled while it runs is abandoned at once, on a daemon thread that
        goes on by itself: the interpreter exits without waiting for it (a stopped run's
        process exits promptly), and its result or error, when it comes, goes nowhere."""
        began, release = threading.Event(), threading.Event()
        threads: list[threading.Thread] = []

        def stuck() -> str:
            """Wait for the test."""
            threads.append(threading.current_thread())
            began.set()
            release.wait(10)
            raise RuntimeError("too late for anyone to hear")

        with anyio.fail_after(5), anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(function_tool(stuck).invoke, {})
                await anyio.to_thread.run_sync(began.wait)
                scope.cancel()
        assert scope.cancelled_caught
        (thread,) = threads
        assert (True, True) == (thread.daemon, thread.is_alive())
        release.set()
        await anyio.to_thread.run_sync(thread.join, 5)
        assert not thread.is_alive()

    @pytest.mark.anyio
    async def test_a_sync_tool_error_comes_back_as_itself(self) -> None:
        """An exception raised in the tool's thread is raised to the caller, unwrapped."""

        def fail() -> str:
            """Fail."""
            raise LookupError("no such disk")

        with pytest.raises(LookupError, match="no such disk"):
            await function_tool(fail).invoke({})

    @pytest.mark.anyio
    async def test_sync_tool_inline_when_asked(self) -> None:
        """With sync_in_thread=False a sync function runs on the loop's thread."""

        def where() -> int:
            """Thread id."""
            return threading.get_ident()

        assert threading.get_ident() == await function_tool(where, sync_in_thread=False).invoke({})

    @pytest.mark.anyio
    async def test_async_tool_runs_inline(self) -> None:
        """An async function is awaited on the loop's thread, unwrapped."""

        async def where() -> int:
            """Thread id."""
            return threading.get_ident()

        tool = function_tool(where)
        assert (threading.get_ident(), where) == (await tool.invoke({}), tool.fn)

    @pytest.mark.anyio
    async def test_async_callable_object(self) -> None:
        """An object with an async ``__call__`` is awaited."""

        class Echo:
            """Echo the text."""

            async def __call__(self, text: str) -> str:
                return text

        tool = function_tool(Echo())
        assert ("Echo", "Echo the text.", "hi") == (
            tool.name,
            tool.description,
            await tool.invoke({"text": "hi"}),
        )

    @pytest.mark.anyio
    async def test_typed_arguments_are_converted(self) -> None:
        """Enum, attrs and tuple parameters receive those types, not raw JSON."""

        async def paint(color: Color, at: Point, size: tuple[int, int]) -> tuple[Any, ...]:
            """Paint."""
            return color, at, size

        tool = function_tool(paint)
        args = parse_arguments(tool, '{"color": "red", "at": {"x": 1}, "size": [2, 3]}')
        assert (Color.RED, Point(1), (2, 3)) == await tool.invoke(args)

    @pytest.mark.anyio
    async def test_unconvertible_argument(self) -> None:
        """A nested value that does not fit its type raises ToolArgumentError naming it."""

        async def paint(at: Point) -> None:
            """Paint."""

        with pytest.raises(ToolArgumentError, match="argument 'at' is invalid"):
            await function_tool(paint).invoke({"at": {"y": 1}})


class TestParseArguments:
    @pytest.fixture
    def tool(self) -> Tool:
        def read(path: str, mode: Literal["r", "w"] = "r", ratio: float = 1.0, n: int = 0) -> None:
            """Read."""

        return function_tool(read)

    def test_valid(self, tool: Tool) -> None:
        """Valid arguments come back as a dict; defaults are left to Python."""
        assert {"path": "/tmp", "mode": "w"} == parse_arguments(
            tool, '{"path": "/tmp", "mode": "w"}'
        )

    @pytest.mark.parametrize("raw", ["", "  \n"])
    def test_empty_text_is_no_arguments(self, raw: str) -> None:
        """Empty argument text means an empty object."""
        assert {} == parse_arguments(make_tool({"type": "object"}), raw)

    def test_malformed_json(self, tool: Tool) -> None:
        """Malformed JSON is reported as such."""
        with pytest.raises(
            ToolArgumentError, match=r"^arguments are not valid JSON \(.*\); send one JSON object$"
        ):
            parse_arguments(tool, '{"path": ')

    def test_not_an_object(self, tool: Tool) -> None:
        """A JSON value other than an object is refused, naming its type."""
        assert "arguments must be a JSON object, got array" == rejection(tool, '["/tmp"]')

    def test_missing_required(self, tool: Tool) -> None:
        """A missing required argument is named."""
        assert "missing required argument 'path'" == rejection(tool, "{}")

    def test_missing_several(self) -> None:
        """Several missing arguments are all named."""

        def f(a: int, b: int) -> None:
            """F."""

        assert "missing required arguments 'a', 'b'" == rejection(function_tool(f), "{}")

    def test_unknown_argument(self, tool: Tool) -> None:
        """An unknown argument is named along with the known ones."""
        expected = "unknown argument 'size'; this tool takes 'mode', 'n', 'path', 'ratio'"
        assert expected == rejection(tool, '{"path": "x", "size": 3}')

    def test_unknown_allowed_by_open_schema(self) -> None:
        """A schema without additionalProperties false accepts unknown arguments."""
        assert {"x": 1} == parse_arguments(make_tool({"type": "object"}), '{"x": 1}')

    def test_wrong_type(self, tool: Tool) -> None:
        """A value of the wrong JSON type is reported with the expected and the given type."""
        assert "argument 'path' must be string; got integer 5" == rejection(tool, '{"path": 5}')

    def test_boolean_is_not_an_integer(self, tool: Tool) -> None:
        """true is not accepted for an integer."""
        expected = "argument 'n' must be integer; got boolean true"
        assert expected == rejection(tool, '{"path": "x", "n": true}')

    def test_enum_membership(self, tool: Tool) -> None:
        """A value outside the enum is reported with the allowed values."""
        expected = 'argument \'mode\' must be one of "r", "w"; got "x"'
        assert expected == rejection(tool, '{"path": "p", "mode": "x"}')

    def test_enum_tells_bool_from_int(self) -> None:
        """true does not match an enum member 1."""
        tool = make_tool({"type": "object", "properties": {"k": {"enum": [1, 2]}}})
        assert "argument 'k' must be one of 1, 2; got true" == rejection(tool, '{"k": true}')

    def test_int_for_float_is_coerced(self, tool: Tool) -> None:
        """An integer given for a number parameter becomes a float."""
        args = parse_arguments(tool, '{"path": "p", "ratio": 2}')
        assert (2.0, float) == (args["ratio"], type(args["ratio"]))

    def test_integral_float_for_int_is_coerced(self, tool: Tool) -> None:
        """An integral float given for an integer parameter becomes an int."""
        args = parse_arguments(tool, '{"path": "p", "n": 3.0}')
        assert (3, int) == (args["n"], type(args["n"]))

    def test_fractional_float_for_int(self, tool: Tool) -> None:
        """A fractional number is refused for an integer parameter."""
        expected = "argument 'n' must be integer; got number 2.5"
        assert expected == rejection(tool, '{"path": "p", "n": 2.5}')

    def test_null_for_optional(self) -> None:
        """null is accepted for an ``X | None`` parameter and refused for a plain one."""

        def f(a: int | None, b: int = 0) -> None:
            """F."""

        tool = function_tool(f)
        assert {"a": None} == parse_arguments(tool, '{"a": null}')
        expected = "argument 'b' must be integer; got null"
        assert expected == rejection(tool, '{"a": 1, "b": null}')

    def test_any_of_alternatives(self) -> None:
        """A value matching any anyOf member is accepted."""

        def f(a: list[int] | None) -> None:
            """F."""

        tool = function_tool(f)
        assert {"a": [1]} == parse_arguments(tool, '{"a": [1]}')
        expected = "argument 'a' must be array or null; got string \"1\""
        assert expected == rejection(tool, '{"a": "1"}')


class TestPydanticArguments:
    """Arguments are validated by pydantic, nested values included, before the call."""

    def test_a_nested_value_is_checked_before_the_call(self) -> None:
        """A value deep in an argument that does not fit is named with its path."""

        async def paint(at: Point) -> None:
            """Paint."""

        expected = "argument 'at' is invalid at at.x: Input should be a valid integer"
        assert expected == rejection(function_tool(paint), '{"at": {"x": "1"}}')

    def test_an_unknown_nested_key(self) -> None:
        """A nested record is closed: a key it does not declare is refused."""

        def f(o: Options) -> None:
            """F."""

        message = rejection(function_tool(f), '{"o": {"name": "n", "colour": "red"}}')
        assert message.startswith("argument 'o' is invalid at o.colour: Extra inputs")

    @pytest.mark.anyio
    async def test_pydantic_models_and_dates(self) -> None:
        """Types pydantic knows (a model, a datetime) are shown and converted by pydantic."""

        async def book(window: Window) -> Window:
            """Book."""
            return window

        tool = function_tool(book)
        start = tool.parameters["properties"]["window"]["properties"]["start"]
        args = parse_arguments(tool, '{"window": {"start": "2030-01-01T12:00:00Z"}}')
        expected = Window(start=datetime(2030, 1, 1, 12, tzinfo=UTC))
        assert ({"type": "string", "format": "date-time"}, expected) == (
            start,
            await tool.invoke(args),
        )

    def test_an_attrs_validator_refusing_the_record(self) -> None:
        """What an attrs class's own validators refuse is an argument error naming it."""

        def f(span: Span) -> None:
            """F."""

        message = rejection(function_tool(f), '{"span": {"high": 0}}')
        assert "argument 'span' is invalid: Value error, high must be positive" == message

    def test_a_required_name_a_schema_does_not_describe(self) -> None:
        """A JSON Schema tool's required name is required even without a property for it."""
        tool = make_tool({"type": "object", "required": ["q"]})
        assert "missing required argument 'q'" == rejection(tool, "{}")

    def test_a_required_that_is_no_list(self) -> None:
        """A server's schema whose required is no list requires nothing, never raises."""
        tool = make_tool({"type": "object", "properties": {"q": {}}, "required": True})
        assert {"q": 1} == parse_arguments(tool, '{"q": 1}')


class TestDeepArguments:
    def test_arguments_nested_past_the_parser_limit(self) -> None:
        """Arguments nested past the JSON parser's limit are rejected, naming the cause."""

        def f(a: list[Any]) -> None:
            """F."""

        message = rejection(function_tool(f), "[" * 100_000)
        assert message.startswith("arguments are nested too deeply")

    def test_arguments_nested_past_the_validator_limit(self) -> None:
        """A value nested past what pydantic's JSON parser takes is refused the same way."""

        def f(a: Any) -> None:
            """F."""

        message = rejection(function_tool(f), '{"a": ' + "[" * 500 + "]" * 500 + "}")
        assert message.startswith("arguments are nested too deeply")


class TestFormatResult:
    def test_string_unchanged(self) -> None:
        """A str is returned as is."""
        assert "hello\nworld" == format_result("hello\nworld", 100)

    @pytest.mark.parametrize("value", [None, "", b""])
    def test_no_output(self, value: Any) -> None:
        """None and empty results read as "(no output)"."""
        assert "(no output)" == format_result(value, 100)

    def test_structures_as_compact_json(self) -> None:
        """Dicts, lists, attrs instances and enums become compact JSON."""
        value = {"p": Point(1), "c": Color.RED, "l": [1, 2.5, True, None], "é": "ü"}
        assert '{"p":{"x":1,"_label":"origin"},"c":"red","l":[1,2.5,true,null],"é":"ü"}' == (
            format_result(value, 1000)
        )

    def test_other_objects_by_str(self) -> None:
        """Objects with no JSON form are rendered by str()."""

        class Thing:
            def __str__(self) -> str:
                return "a thing"

        assert "a thing" == format_result(Thing(), 100)

    def test_truncation_marker_and_length(self) -> None:
        """Text past max_chars is cut to max_chars and the marker is added after it."""
        text = format_result("x" * 12_345 + "y" * 10, 10)
        marker = "\n…[truncated: 12345 more characters]"
        assert ("x" * 10 + marker, 10 + len(marker)) == (text, len(text))

    def test_exactly_max_chars_is_not_truncated(self) -> None:
        """Text of exactly max_chars characters is kept whole."""
        assert "x" * 10 == format_result("x" * 10, 10)

    def test_zero_means_no_limit(self) -> None:
        """max_chars of zero disables truncation."""
        assert 50_000 == len(format_result("x" * 50_000, 0))

    def test_json_is_truncated_too(self) -> None:
        """Structured results are truncated after rendering."""
        assert "[1,2\n…[truncated: 5 more characters]" == format_result([1, 2, 3, 4], 4)


class TestFormatResultNeverRaises:
    """A result whose rendering raises becomes an error text for the model."""

    def test_str_raising(self) -> None:
        """An object whose __str__ raises is reported as a result that could not be rendered."""

        class Broken:
            def __str__(self) -> str:
                raise RuntimeError("no text for you")

        text = format_result(Broken(), 1000)
        assert text.startswith("error: the tool's result could not be rendered")
        assert "RuntimeError: no text for you" in text

    def test_int_too_long_to_print(self) -> None:
        """An int past Python's digit limit (str() raises ValueError) is an error text."""
        text = format_result(10**5000, 1000)
        assert text.startswith("error: the tool's result could not be rendered: ValueError")

    def test_json_with_an_unprintable_value(self) -> None:
        """A dict holding such an int cannot be JSON nor str: an error text, never a raise."""
        text = format_result({"n": 10**5000}, 1000)
        assert text.startswith("error: the tool's result could not be rendered")

    def test_json_falling_back_to_a_raising_str(self) -> None:
        """An object inside a dict whose __str__ raises is an error text too."""

        class Broken:
            def __str__(self) -> str:
                raise RuntimeError("inner")

            __repr__ = __str__

        assert format_result({"x": Broken()}, 1000).startswith("error: ")

    def test_a_lone_surrogate_is_replaced(self) -> None:
        """A result holding a lone surrogate comes out as encodable UTF-8."""
        text = format_result("bad \ud800 byte", 1000)
        assert "bad \ufffd byte" == text
        assert "\ufffd" in format_result({"k": "\udcff"}, 1000)


class TestFormatError:
    def test_str_raising_exception(self) -> None:
        """An exception whose str() raises still renders, by its type."""

        class Nasty(Exception):
            def __str__(self) -> str:
                raise RuntimeError("no")

        text = format_error(Nasty())
        assert text.startswith("error: Nasty")
        assert "could not be rendered" in text

    def test_surrogate_in_message(self) -> None:
        """A lone surrogate in the message is replaced."""
        assert "error: ValueError: a\ufffdb" == format_error(ValueError("a\ud800b"))

    def test_type_and_message(self) -> None:
        """An exception reads "error: <Type>: <message>"."""
        assert "error: FileNotFoundError: no such file" == format_error(
            FileNotFoundError("no such file")
        )

    def test_empty_message(self) -> None:
        """An exception without message reads "error: <Type>"."""
        assert "error: TimeoutError" == format_error(TimeoutError())

    def test_long_message_truncated(self) -> None:
        """A long message is truncated with the marker."""
        text = format_error(ValueError("v" * 100), max_chars=20)
        assert "error: ValueError: v\n…[truncated: 99 more characters]" == text

    def test_json_safe_message(self) -> None:
        """A message with quotes or newlines is kept verbatim."""
        assert 'error: ValueError: bad "x"\nline' == format_error(ValueError('bad "x"\nline'))


def test_argument_error_is_a_value_error() -> None:
    """ToolArgumentError is a ValueError, outside the TurnError tree."""
    assert (True, False) == (
        issubclass(ToolArgumentError, ValueError),
        issubclass(ToolArgumentError, TurnError),
    )

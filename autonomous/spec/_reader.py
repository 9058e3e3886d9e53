"""Reading agent spec files: TOML to an :class:`~._spec.AgentSpec`, every problem at once.

Each problem names the file, the line that sets the key (see :mod:`._lines`), the key and
what is wrong; a misspelt key gets a "did you mean". Wherever a spec takes seconds it also takes
a duration (``"90s"``, ``"30m"``, ``"1h30m"``).
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from permissions import Mode, Rule
from usage import Pricing

from .._errors import ConfigurationError
from ..retry import TransientRetry, transient
from ._durations import parse_duration
from ._lines import key_lines
from ._refs import ToolRef
from ._spec import RESERVED_OUTCOMES, AgentSpec, MCPEntry, Problem, problem_at

__all__ = ["load_spec", "read_spec"]

_TOP = (
    "name", "model", "goal", "app", "user", "instructions", "steering", "steering_files",
    "skills", "skill_files", "tools", "outcomes", "result_schema", "litellm", "budgets",
    "scheduler", "permissions", "pricing", "run", "retry", "on_exit", "mcp",
)  # fmt: skip
_BUDGETS = {
    "max_turns": "count",
    "max_input_tokens": "count",
    "max_output_tokens": "count",
    "max_cost_usd": "number",
    "max_wallclock": "seconds",
    "per_turn_timeout": "seconds",
    "tool_timeout": "seconds",
    "max_model_calls_per_turn": "count",
    "max_tool_result_chars": "count",
}
_RUN = {
    "continuation_prompt": "text",
    "history_turns": "count",
    "history": "text",
    "history_keep_turns": "count",
    "history_summary_model": "text",
    "lease_ttl": "seconds",
    "control_poll": "seconds",
    "pause_max": "seconds",
    "done_tool_name": "text",
    "done_tool_description": "text",
    "schedule_tool_name": "text",
    "schedule_tool_description": "text",
}
_SCHEDULER = {"kind": "text", "schedule_tool_max_defer": "seconds", "max_defer": "seconds"}
_PRICING = {
    "input_per_mtok": "number",
    "output_per_mtok": "number",
    "cached_input_per_mtok": "number",
}
_TOOL_TABLE = {"ref": "text", "name": "text", "description": "text", "read_only": "bool",
               "timeout": "seconds"}  # fmt: skip
_RETRY = {"attempts": "count", "base": "seconds", "cap": "seconds", "jitter": "bool",
          "max_retry_after": "seconds"}  # fmt: skip
_RULE_TABLE = ("tool", "admin_only", "labels", "identities")
_MCP_TABLE = {"name": "text", "command": "text", "args": "strings", "env": "table",
              "cwd": "text", "url": "text", "headers": "table",
              "connect_timeout": "seconds"}  # fmt: skip
_MCP_NAME = re.compile(r"[a-zA-Z0-9_-]{1,40}")
_SCHEDULERS = ("sleep", "exit")
_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "text": ("a non-blank string", lambda v: isinstance(v, str) and bool(v.strip())),
    "count": ("an integer >= 0", lambda v: type(v) is int and v >= 0),
    "number": ("a number >= 0", lambda v: type(v) in (int, float) and v >= 0),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "strings": ("a list of strings", lambda v: isinstance(v, list)
                and all(isinstance(s, str) for s in v)),
    "table": ("a table", lambda v: isinstance(v, dict)),
    "seconds": ("seconds >= 0 or a duration such as \"30m\" or \"1h\"", lambda v: False),
}  # fmt: skip


class _Reader:
    """Walks the TOML document, collecting problems instead of stopping at the first one."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.problems: list[Problem] = []
        #: The line each key is set on (filled in once the text is read).
        self.lines: dict[str, int] = {}

    def error(self, key: str, message: str) -> None:
        """Record an error at ``key``."""
        self.problems.append(problem_at("error", self.shown, key, message, self.lines))

    def warn(self, key: str, message: str) -> None:
        """Record a warning at ``key``."""
        self.problems.append(problem_at("warning", self.shown, key, message, self.lines))

    def table(self, data: Any, key: str, known: Sequence[str]) -> dict[str, Any]:
        """``data`` as a table (``{}`` with an error when it is not), unknown keys reported."""
        if not isinstance(data, dict):
            self.error(key, f"must be a table, got {data!r}")
            return {}
        for name in sorted(set(data) - set(known)):
            where = f"{key}.{name}" if key else name
            self.error(where, _unknown(name, known))
        return data

    def value(self, table: Mapping[str, Any], key: str, kind: str, prefix: str = "") -> Any:
        """``table[key]`` when it has the right kind; None (and an error) otherwise."""
        if key not in table:
            return None
        value = table[key]
        text, check = _KINDS[kind]
        if kind == "seconds":
            seconds = _seconds(value)
            if seconds is None:
                self.error(prefix + key, f"must be {text}, got {value!r}")
            return seconds
        if not check(value):
            self.error(prefix + key, f"must be {text}, got {value!r}")
            return None
        return value

    def options(self, data: Any, key: str, kinds: Mapping[str, str]) -> dict[str, Any]:
        """A table of typed options (``[budgets]``, ``[run]`` ...), only the valid ones kept."""
        table = self.table(data, key, list(kinds))
        found = {name: self.value(table, name, kinds[name], f"{key}.") for name in kinds}
        return {name: value for name, value in found.items() if value is not None}


def _unknown(name: str, known: Sequence[str]) -> str:
    """The message for an unknown key: the close match, if any, and the keys there are."""
    close = difflib.get_close_matches(name, list(known), n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key; {guess}the known keys are: {', '.join(sorted(known))}"


def _seconds(value: Any) -> float | None:
    """Seconds from a number or a duration string (``"30m"``); None when it is neither or < 0."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        seconds = parse_duration(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")


def read_spec(path: str | os.PathLike[str]) -> tuple[AgentSpec | None, list[Problem]]:
    """Parse the spec file at ``path``: the spec (None when unreadable) and every problem found."""
    shown = os.fspath(path)
    reader = _Reader(shown)
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        reader.error("", "no such file")
        return None, reader.problems
    except (OSError, UnicodeDecodeError) as exc:
        reader.error("", f"cannot be read: {exc}")
        return None, reader.problems
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_LINE.search(str(exc))
        line = int(found.group(1)) if found else None
        where = shown if line is None else f"{shown}:{line}"
        reader.problems.append(Problem("error", where, f"not valid TOML: {exc}", line))
        return None, reader.problems
    reader.lines = key_lines(text)
    return _parse(file.resolve(), data, reader), reader.problems


def load_spec(path: str | os.PathLike[str]) -> AgentSpec:
    """Read a spec file; every structural error is in one :class:`ConfigurationError`."""
    spec, problems = read_spec(path)
    errors = [p for p in problems if p.severity == "error"]
    if errors or spec is None:
        lines = "\n".join(f"  {p.where}: {p.message}" for p in errors)
        raise ConfigurationError(f"invalid agent spec {os.fspath(path)}:\n{lines}")
    return spec


def _parse(path: Path, data: dict[str, Any], r: _Reader) -> AgentSpec:
    """The spec from the TOML document; problems go to the reader."""
    r.table(data, "", _TOP)
    model = r.value(data, "model", "text")
    if "model" not in data:
        r.error("model", "missing: set a litellm model string or 'scripted:module:function'")
    name = r.value(data, "name", "text") or path.stem
    scheduler, max_tool_defer, max_defer = _scheduler(data.get("scheduler"), r)
    mode, allow, deny = _permissions(data.get("permissions", {}), r)
    return AgentSpec(
        path=path,
        name=name,
        model=model or "",
        goal=r.value(data, "goal", "str") or "",
        app=r.value(data, "app", "text") or name,
        user=r.value(data, "user", "text") or "cli",
        instructions=r.value(data, "instructions", "str") or "",
        steering=r.value(data, "steering", "str"),
        steering_files=tuple(r.value(data, "steering_files", "strings") or ()),
        skills=tuple(r.value(data, "skills", "strings") or ()),
        skill_files=tuple(r.value(data, "skill_files", "strings") or ()),
        tools=_tools(data.get("tools", []), r),
        mcp=_mcp(data.get("mcp", []), r),
        outcomes=_outcomes(data.get("outcomes", []), r),
        result_schema=r.value(data, "result_schema", "table"),
        litellm=_litellm(data.get("litellm", {}), r),
        budgets=r.options(data.get("budgets", {}), "budgets", _BUDGETS),
        scheduler=scheduler,
        schedule_tool_max_defer=max_tool_defer,
        max_defer=max_defer,
        permission_mode=mode,
        allow=allow,
        deny=deny,
        pricing=_pricing(data.get("pricing"), r),
        run=r.options(data.get("run", {}), "run", _RUN),
        on_exit=tuple(r.value(data, "on_exit", "strings") or ()),
        retry=_retry(data.get("retry"), r),
        lines=dict(r.lines),
    )


def _tools(data: Any, r: _Reader) -> tuple[ToolRef, ...]:
    """The ``tools`` list: references, as strings or tables."""
    if not isinstance(data, list):
        r.error("tools", f"must be a list of 'module:function' strings or tables, got {data!r}")
        return ()
    refs: list[ToolRef] = []
    for i, entry in enumerate(data):
        key = f"tools[{i}]"
        table = r.table({"ref": entry} if isinstance(entry, str) else entry, key, list(_TOOL_TABLE))
        found = {k: r.value(table, k, kind, f"{key}.") for k, kind in _TOOL_TABLE.items()}
        ref = found.pop("ref")
        if ref is None:
            if "ref" not in table:
                r.error(key, "missing ref = 'module:function'")
            continue
        if ":" not in ref:
            r.error(key, f"{ref!r} is not a 'module:function' reference")
            continue
        refs.append(ToolRef(ref, **{k: v for k, v in found.items() if v is not None}))
    return tuple(refs)


def _mcp(data: Any, r: _Reader) -> tuple[MCPEntry, ...]:
    """The ``[[mcp]]`` tables: each a named server with a command or a URL."""
    if not isinstance(data, list):
        r.error("mcp", f"must be [[mcp]] tables, got {data!r}")
        return ()
    entries: list[MCPEntry] = []
    for i, entry in enumerate(data):
        key = f"mcp[{i}]"
        table = r.table(entry, key, list(_MCP_TABLE))
        found = {k: r.value(table, k, kind, f"{key}.") for k, kind in _MCP_TABLE.items()}
        for mapping in ("env", "headers"):
            values = found[mapping] or {}
            if not all(isinstance(v, str) for v in values.values()):
                r.error(f"{key}.{mapping}", "values must be strings")
                found[mapping] = None
        if found["connect_timeout"] == 0:  # a start no server could make
            r.error(f"{key}.connect_timeout", "must be more than 0 seconds")
            found["connect_timeout"] = None
        name = found.pop("name")
        if name is None and "name" not in table:
            r.error(key, "missing name = '...': it names the server in errors and logs")
        elif name is not None and _MCP_NAME.fullmatch(name) is None:
            r.error(f"{key}.name", f"{name!r} is not 1 to 40 letters, digits, '_' or '-'")
        elif name is not None and name in {e.name for e in entries}:
            r.error(f"{key}.name", f"{name!r} names another [[mcp]] table too")
        elif _mcp_kind(table, key, r) and name is not None:
            args = tuple(found.pop("args") or ())
            given = {k: v for k, v in found.items() if v}
            entries.append(MCPEntry(name, args=args, index=i, **given))
    return tuple(entries)


def _mcp_kind(table: dict[str, Any], key: str, r: _Reader) -> bool:
    """Whether the table is one kind of server: a command (stdio) or a url (HTTP)."""
    if ("command" in table) == ("url" in table):
        r.error(key, "set command (a server started over stdio) or url (streamable HTTP), one")
        return False
    wrong = ("headers",) if "command" in table else ("args", "env", "cwd")
    for name in wrong:
        if name in table:
            r.error(
                f"{key}.{name}",
                f"is not for a server with {'url' if 'url' in table else 'command'}",
            )
            return False
    return True


def _outcomes(data: Any, r: _Reader) -> tuple[str, ...]:
    """The closed outcome set: non-blank, unique, not reserved."""
    if not isinstance(data, list):
        r.error("outcomes", f"must be a list of outcome names, got {data!r}")
        return ()
    seen: list[str] = []
    for value in data:
        if not isinstance(value, str) or not value.strip():
            r.error("outcomes", f"an outcome must be a non-blank string, got {value!r}")
        elif value in seen:
            r.error("outcomes", f"{value!r} is declared twice")
        elif value in RESERVED_OUTCOMES:
            r.error("outcomes", f"{value!r} is reserved for the runtime's own exits")
        else:
            seen.append(value)
    return tuple(seen)


def _litellm(data: Any, r: _Reader) -> dict[str, Any]:
    """The ``[litellm]`` keywords; never a key, never the model."""
    if not isinstance(data, dict):
        r.error("litellm", f"must be a table of litellm.acompletion keywords, got {data!r}")
        return {}
    settings = dict(data)
    if "api_key" in settings:
        r.error("litellm.api_key", "never put a key in the file: name its variable in api_key_env")
        del settings["api_key"]
    if "model" in settings:
        r.error("litellm.model", "set the model with the top-level 'model' key")
        del settings["model"]
    if "api_key_env" in settings and r.value(settings, "api_key_env", "text", "litellm.") is None:
        del settings["api_key_env"]
    return settings


def _scheduler(data: Any, r: _Reader) -> tuple[str | None, float, float]:
    """The scheduler kind and its caps (a table, or a kind string)."""
    if data is None:
        return None, 0.0, 0.0
    if isinstance(data, str):
        data = {"kind": data}
    table = r.options(data, "scheduler", _SCHEDULER)
    kind = table.get("kind")
    if kind is None:
        r.error("scheduler.kind", f"missing: one of {', '.join(_SCHEDULERS)}")
    elif kind not in _SCHEDULERS:
        r.error("scheduler.kind", f"{kind!r} is not one of {', '.join(_SCHEDULERS)}")
        kind = None
    return kind, table.get("schedule_tool_max_defer", 0.0), table.get("max_defer", 0.0)


def _permissions(data: Any, r: _Reader) -> tuple[str | None, tuple[Rule, ...], tuple[Rule, ...]]:
    """The gate's mode and its allow and deny rules."""
    table = r.table(data, "permissions", ("mode", "allow", "deny"))
    if not table:
        return None, (), ()
    mode = r.value(table, "mode", "text", "permissions.")
    if mode is None and "mode" not in table:
        r.error("permissions.mode", f"missing: one of {', '.join(m.value for m in Mode)}")
    elif mode is not None and mode not in {m.value for m in Mode}:
        r.error("permissions.mode", f"{mode!r} is not one of {', '.join(m.value for m in Mode)}")
        mode = None
    rules = {
        which: _rules(table.get(which, []), f"permissions.{which}", r)
        for which in ("allow", "deny")
    }
    return mode, rules["allow"], rules["deny"]


def _rules(data: Any, key: str, r: _Reader) -> tuple[Rule, ...]:
    """A list of rules: tool globs or rule tables."""
    if not isinstance(data, list):
        r.error(key, f"must be a list of tool globs or rule tables, got {data!r}")
        return ()
    rules: list[Rule] = []
    for i, entry in enumerate(data):
        where = f"{key}[{i}]"
        if isinstance(entry, dict):
            r.table(entry, where, _RULE_TABLE)
        try:
            if isinstance(entry, dict):
                rules.append(Rule(**{k: v for k, v in entry.items() if k in _RULE_TABLE}))
            else:
                rules.append(Rule(entry))
        except (TypeError, ValueError) as exc:
            r.error(where, f"not a valid rule: {exc}")
    return tuple(rules)


def _pricing(data: Any, r: _Reader) -> Pricing | None:
    """The ``[pricing]`` table, when present."""
    if data is None:
        return None
    return Pricing(**r.options(data, "pricing", _PRICING))


def _retry(data: Any, r: _Reader) -> TransientRetry | None:
    """The ``[retry]`` policy: the defaults without the table, None for ``attempts = 0``."""
    if data is None:
        return transient()
    table = r.options(data, "retry", _RETRY)
    if table.get("attempts") == 0:
        return None
    return transient(**table)

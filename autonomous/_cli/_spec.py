"""Agent spec files: an agent described in TOML, loaded, checked and built.

A spec lives in the agent's own directory; every path in it (steering and skill files, the
modules named by tool and model references) is taken relative to that directory::

    name = "monitor"
    model = "openai/gpt-4o-mini"            # or "scripted:monitor_tools:scripted"
    goal = "Watch the disk usage of this host."
    instructions = "Each turn call check_disk, then schedule the next check."
    steering = "Never delete anything."
    steering_files = ["steering/ops.md"]
    skill_files = ["skills/disk.md"]
    tools = ["monitor_tools:check_disk", { ref = "monitor_tools:df", read_only = true }]
    outcomes = ["calm", "alert"]

    [litellm]                               # keywords for litellm.acompletion
    api_base = "http://127.0.0.1:11434"
    api_key_env = "OPENAI_API_KEY"          # the NAME of the variable, never the key
    temperature = 0.2

    [budgets]
    max_turns = 50
    max_cost_usd = 0.5
    max_wallclock = 3600
    tool_timeout = 60

    [scheduler]
    kind = "exit"                           # "sleep" or "exit"; leave the table out for none
    schedule_tool_max_defer = 3600

    [permissions]
    mode = "allow"                          # ask | allow | yolo | plan
    allow = ["check_disk", "deploy"]        # allow mode runs only the tools listed here
    deny = ["rm_*", { tool = "deploy", admin_only = true }]

:func:`load_spec` reads a file into an :class:`AgentSpec` (a :class:`ConfigurationError` names
the file, the key and the problem); ``autonomous validate`` lists every :class:`Problem`. Reference
modules are imported with the spec's directory on ``sys.path``, so module names must be unique
across the specs one process runs.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from eventlog import EventLog, SessionRef
from permissions import Gate, Mode, Prompter, Rule
from scheduler import ExitOnDeferScheduler, Scheduler, SleepScheduler
from usage import Pricing

from .._agent import Agent
from .._errors import ConfigurationError
from .._model import Model
from .._result import StopReason
from .._tools import Tool
from ._refs import SCRIPTED, ToolRef, scripted_factory, tool_from_ref

#: Outcome names the runtime uses for its own exits; a declared outcome must not reuse them.
RESERVED_OUTCOMES = frozenset(
    {r.value for r in StopReason} | {"error", "max_iterations", "budget_exceeded"}
)
Severity = Literal["error", "warning"]

_TOP = (
    "name", "model", "goal", "app", "user", "instructions", "steering", "steering_files",
    "skills", "skill_files", "tools", "outcomes", "result_schema", "litellm", "budgets",
    "scheduler", "permissions", "pricing", "run", "on_exit",
)  # fmt: skip
_BUDGETS = {
    "max_turns": "count",
    "max_input_tokens": "count",
    "max_output_tokens": "count",
    "max_cost_usd": "number",
    "max_wallclock": "number",
    "per_turn_timeout": "number",
    "tool_timeout": "number",
    "max_model_calls_per_turn": "count",
    "max_tool_result_chars": "count",
}
_RUN = {
    "continuation_prompt": "text",
    "history_turns": "count",
    "lease_ttl": "number",
    "control_poll": "number",
    "pause_max": "number",
    "done_tool_name": "text",
    "done_tool_description": "text",
    "schedule_tool_name": "text",
    "schedule_tool_description": "text",
}
_SCHEDULER = {"kind": "text", "schedule_tool_max_defer": "number", "max_defer": "number"}
_PRICING = {
    "input_per_mtok": "number",
    "output_per_mtok": "number",
    "cached_input_per_mtok": "number",
}
_TOOL_TABLE = {"ref": "text", "name": "text", "description": "text", "read_only": "bool",
               "timeout": "number"}  # fmt: skip
_RULE_TABLE = ("tool", "admin_only", "labels", "identities")
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
}  # fmt: skip


@attrs.frozen
class Problem:
    """One finding of :func:`validate`: ``error`` fails validation, ``warning`` does not."""

    severity: Severity
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.message}"


@attrs.frozen(eq=False)
class AgentSpec:
    """An agent as a spec file describes it; :meth:`build_function` and :meth:`run_options`
    turn it into what the entry points take.

    ``path`` is the spec file (absolute); its directory is the agent's own (:attr:`base_dir`).
    ``model`` is a litellm model string or ``"scripted:module:function"``; ``litellm`` holds the
    ``[litellm]`` keywords (``api_key_env`` names a variable, read at build time). ``app`` and
    ``user`` make the session key of a run, with its session id. ``budgets`` and ``run`` hold run
    options by their :class:`~autonomous.RunOptions` names; ``scheduler`` is ``"sleep"``,
    ``"exit"`` or None; ``permission_mode`` None means no gate.
    """

    path: Path
    name: str
    model: str
    goal: str = ""
    app: str = ""
    user: str = "cli"
    instructions: str = ""
    steering: str | None = None
    steering_files: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    skill_files: tuple[str, ...] = ()
    tools: tuple[ToolRef, ...] = ()
    outcomes: tuple[str, ...] = ()
    result_schema: dict[str, Any] | None = None
    litellm: dict[str, Any] = attrs.field(factory=dict)
    budgets: dict[str, int | float] = attrs.field(factory=dict)
    scheduler: str | None = None
    schedule_tool_max_defer: float = 0.0
    max_defer: float = 0.0
    permission_mode: str | None = None
    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    pricing: Pricing | None = None
    run: dict[str, Any] = attrs.field(factory=dict)
    on_exit: tuple[str, ...] = ()  # the completion hook's command: see autonomous/_cli/_hooks.py

    @property
    def base_dir(self) -> Path:
        """The agent's own directory: the spec file's directory."""
        return self.path.parent

    @property
    def scripted(self) -> bool:
        """True when the model is a scripted (offline) model factory."""
        return self.model.startswith(SCRIPTED)

    def session_ref(self, log: EventLog, session_id: str) -> SessionRef:
        """The session ``session_id`` of this agent (app and user from the spec) in ``log``."""
        return SessionRef(log=log, app=self.app or self.name, user=self.user, session_id=session_id)

    def load_tools(self) -> list[Tool]:
        """Import every tool reference; a :class:`ConfigurationError` names the bad one."""
        tools = []
        for i, ref in enumerate(self.tools):
            try:
                tools.append(tool_from_ref(ref, self.base_dir))
            except ConfigurationError as exc:
                raise ConfigurationError(f"{self.path}: tools[{i}]: {exc}") from exc
        return tools

    def model_factory(self) -> Callable[[], str | Model]:
        """A callable giving the model for one build: the litellm string, or a new scripted one."""
        if not self.scripted:
            return lambda: self.model
        try:
            return scripted_factory(self.model, self.base_dir)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.path}: model: {exc}") from exc

    def completion_kwargs(self) -> dict[str, Any]:
        """The ``[litellm]`` keywords, with ``api_key_env`` read from the environment."""
        if self.scripted:
            return {}
        kwargs = {k: v for k, v in self.litellm.items() if k != "api_key_env"}
        env = self.litellm.get("api_key_env")
        if env:
            if env not in os.environ:
                raise ConfigurationError(
                    f"{self.path}: litellm.api_key_env: the environment variable {env} is not set"
                )
            kwargs["api_key"] = os.environ[env]
        return kwargs

    def build_function(self, ref: SessionRef) -> Callable[..., Agent]:
        """``build(extra_tools, session_id=None) -> Agent`` for run_autonomous and
        resume_autonomous; tools and the model factory are imported now, so errors show early."""
        tools = self.load_tools()
        make_model = self.model_factory()
        completion = self.completion_kwargs()

        def build(extra_tools: Sequence[Tool], session_id: str | None = None) -> Agent:
            """An Agent for a run (``session_id`` set by resume_autonomous)."""
            session = ref if session_id is None else attrs.evolve(ref, session_id=session_id)
            return Agent(
                make_model(),
                instructions=self.instructions,
                tools=[*tools, *extra_tools],
                session=session,
                name=self.name,
                steering=self.steering,
                steering_files=self.steering_files,
                skills=self.skills,
                skill_files=self.skill_files,
                base_dir=self.base_dir,
                **completion,
            )

        return build

    def run_options(self, *, prompter: Prompter | None = None) -> dict[str, Any]:
        """The keyword options for the entry points (budgets, scheduler, outcomes, gate ...).

        ``prompter`` answers an ``ask``-mode gate (``permissions.TerminalPrompter()`` on a
        terminal); without one such a gate makes the entry points refuse to start.
        """
        options: dict[str, Any] = {**self.budgets, **self.run}
        if self.scheduler is not None:
            made: Scheduler = (
                SleepScheduler() if self.scheduler == "sleep" else ExitOnDeferScheduler()
            )
            options.update(
                scheduler=made,
                schedule_tool_max_defer=self.schedule_tool_max_defer,
                max_defer=self.max_defer,
            )
        if self.outcomes:
            options["outcomes"] = self.outcomes
        if self.result_schema is not None:
            options["result_schema"] = self.result_schema
        if self.permission_mode is not None:
            options["permissions_gate"] = Gate(
                Mode(self.permission_mode), prompter, allow=self.allow, deny=self.deny
            )
        if self.pricing is not None:
            options["pricing"] = self.pricing
        return options


# ---- reading ---------------------------------------------------------------------------


class _Reader:
    """Walks the TOML document, collecting problems instead of stopping at the first one."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.problems: list[Problem] = []

    def error(self, key: str, message: str) -> None:
        """Record an error at ``key``."""
        self.problems.append(
            Problem("error", f"{self.shown}: {key}" if key else self.shown, message)
        )

    def warn(self, key: str, message: str) -> None:
        """Record a warning at ``key``."""
        self.problems.append(Problem("warning", f"{self.shown}: {key}", message))

    def table(self, data: Any, key: str, known: Sequence[str]) -> dict[str, Any]:
        """``data`` as a table (``{}`` with an error when it is not), unknown keys reported."""
        if not isinstance(data, dict):
            self.error(key, f"must be a table, got {data!r}")
            return {}
        for name in sorted(set(data) - set(known)):
            where = f"{key}.{name}" if key else name
            self.error(where, f"unknown key; the known keys are: {', '.join(sorted(known))}")
        return data

    def value(self, table: Mapping[str, Any], key: str, kind: str, prefix: str = "") -> Any:
        """``table[key]`` when it has the right kind; None (and an error) otherwise."""
        if key not in table:
            return None
        value = table[key]
        text, check = _KINDS[kind]
        if not check(value):
            self.error(prefix + key, f"must be {text}, got {value!r}")
            return None
        return value

    def options(self, data: Any, key: str, kinds: Mapping[str, str]) -> dict[str, Any]:
        """A table of typed options (``[budgets]``, ``[run]`` ...), only the valid ones kept."""
        table = self.table(data, key, list(kinds))
        found = {name: self.value(table, name, kinds[name], f"{key}.") for name in kinds}
        return {name: value for name, value in found.items() if value is not None}


def read_spec(path: str | os.PathLike[str]) -> tuple[AgentSpec | None, list[Problem]]:
    """Parse the spec file at ``path``: the spec (None when unreadable) and every problem found."""
    shown = os.fspath(path)
    reader = _Reader(shown)
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        reader.error("", "no such file")
        return None, reader.problems
    except (OSError, UnicodeDecodeError) as exc:
        reader.error("", f"cannot be read: {exc}")
        return None, reader.problems
    except tomllib.TOMLDecodeError as exc:
        reader.error("", f"not valid TOML: {exc}")
        return None, reader.problems
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
    return None if data is None else Pricing(**r.options(data, "pricing", _PRICING))

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

    [budgets]                               # seconds may be durations: "90s", "30m", "1h"
    max_turns = 50
    max_cost_usd = 0.5                      # needs a price: litellm's table or [pricing]
    max_wallclock = "1h"
    tool_timeout = 60

    [retry]                                 # transient model errors (429, 5xx, timeouts)
    attempts = 5                            # retries of a failing turn; 0: none
    base = "1s"                             # backoff doubles from base up to cap
    cap = "1m"
    jitter = true                           # full jitter; a Retry-After header wins

    [scheduler]
    kind = "exit"                           # "sleep" or "exit"; leave the table out for none
    schedule_tool_max_defer = 3600

    [permissions]
    mode = "allow"                          # ask | allow | yolo | plan
    allow = ["check_disk", "deploy"]        # allow mode runs only the tools listed here
    deny = ["rm_*", { tool = "deploy", admin_only = true }]

    [[mcp]]                                 # an MCP server's tools (the [mcp] extra)
    name = "disk"                           # names it; prefixes its tools on a name clash
    command = "python"                      # started over stdio, in the agent's directory
    args = ["mcp_disk_server.py"]
    env = { DISK_ROOT = "/" }               # optional; cwd = "..." too

    [[mcp]]
    name = "tickets"
    url = "https://mcp.example.org/mcp"     # streamable HTTP
    headers = { X-Team = "ops" }
    connect_timeout = "1m"                  # to start and list its tools (default 30 s)

This module holds the value, :class:`AgentSpec`, and the :class:`Problem` findings;
:mod:`._reader` reads a file into one (:func:`~._reader.load_spec`: a
:class:`ConfigurationError` names the file, the line, the key and the problem);
``autonomous validate`` lists every :class:`Problem`. Reference modules are imported with the
spec's directory on ``sys.path``, so module names must be unique across the specs one process
runs. Without a ``[retry]`` table a spec retries transient errors with
:func:`autonomous.retry.transient`'s defaults.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from eventlog import EventLog, SessionRef
from permissions import Gate, Mode, Prompter, Rule
from scheduler import ExitOnDeferScheduler, Scheduler, SleepScheduler
from usage import Pricing

from .._agent import Agent
from .._errors import ConfigurationError
from .._model import Model
from .._result import StopReason
from .._tools._tools import Tool
from ..retry import TransientRetry, transient
from ._refs import SCRIPTED, ToolRef, scripted_factory, tool_from_ref

if TYPE_CHECKING:
    from ..mcp import MCPServer

#: Outcome names the runtime uses for its own exits; a declared outcome must not reuse them.
RESERVED_OUTCOMES = frozenset(
    {r.value for r in StopReason} | {"error", "max_iterations", "budget_exceeded"}
)
Severity = Literal["error", "warning"]
#: What :meth:`AgentSpec.build_function` gives: ``build(extra_tools, session_id=None) -> Agent``.
SessionBuild = Callable[..., Agent]


@attrs.frozen
class Problem:
    """One finding of :func:`validate`: ``error`` fails validation, ``warning`` does not."""

    severity: Severity
    #: ``file: key``, or ``file:line: key`` when the key's line is known.
    where: str
    message: str
    #: The line of the spec file the problem is on (None when not known).
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.message}"


@attrs.frozen
class MCPEntry:
    """One ``[[mcp]]`` table: an MCP server, by ``command`` (stdio) or ``url`` (HTTP).

    A relative ``cwd``, and a ``command`` that is a relative path (``./server``), are taken
    from the agent's directory, which is also where a server starts when ``cwd`` is not set.
    """

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] | None = None
    #: Seconds the server has to start and list its tools (None: the default, 30).
    connect_timeout: float | None = None
    #: Its place among the file's ``[[mcp]]`` tables (``mcp[i]`` in problems).
    index: int = 0

    @property
    def key(self) -> str:
        """``mcp[i]``: the table in problems and errors."""
        return f"mcp[{self.index}]"

    def command_path(self, base_dir: Path) -> str:
        """The command to start: a relative path from ``base_dir``, else as written."""
        if os.sep in self.command and not os.path.isabs(self.command):
            return str(base_dir / self.command)
        return self.command

    def folder(self, base_dir: Path) -> Path:
        """The directory the server starts in."""
        return base_dir / self.cwd if self.cwd is not None else base_dir

    def server(self, base_dir: Path) -> MCPServer:
        """The :class:`autonomous.mcp.MCPServer` (a ConfigurationError without the extra)."""
        try:
            from ..mcp import MCPServer
        except ImportError as exc:
            raise ConfigurationError(str(exc)) from None
        timeout = {} if self.connect_timeout is None else {"connect_timeout": self.connect_timeout}
        if self.url:
            return MCPServer.http(self.url, headers=self.headers, name=self.name, **timeout)
        return MCPServer.stdio(
            self.command_path(base_dir),
            self.args,
            env=self.env,
            cwd=self.folder(base_dir),
            name=self.name,
            **timeout,
        )


@attrs.frozen(eq=False)
class AgentSpec:
    """An agent as a spec file describes it; :meth:`build_function` and :meth:`run_options`
    turn it into what the entry points take.

    ``path`` is the spec file (absolute); its directory is the agent's own (:attr:`base_dir`).
    ``model`` is a litellm model string or ``"scripted:module:function"``; ``litellm`` holds the
    ``[litellm]`` keywords (``api_key_env`` names a variable, read at build time). ``app`` and
    ``user`` make the session key of a run, with its session id. ``budgets`` and ``run`` hold run
    options by their :class:`~autonomous.RunOptions` names; ``scheduler`` is ``"sleep"``,
    ``"exit"`` or None; ``permission_mode`` None means no gate; ``retry`` is the retry policy
    (None: a failed turn ends the run). ``lines`` maps keys (``budgets.max_turns``) to the
    lines of the file that set them, for problems found later. ``mcp`` holds the
    ``[[mcp]]`` servers.
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
    mcp: tuple[MCPEntry, ...] = ()
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
    retry: TransientRetry | None = attrs.field(factory=transient)
    lines: Mapping[str, int] = attrs.field(factory=dict, repr=False)

    @property
    def base_dir(self) -> Path:
        """The agent's own directory: the spec file's directory."""
        return self.path.parent

    @property
    def identity(self) -> str:
        """The spec's identity: ``sha256:`` and the hex SHA-256 of the file's bytes as they
        are now (recorded with a session, and in its checkpoints as ``agent_version``)."""
        return file_identity(self.path)

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

    def mcp_servers(self) -> list[MCPServer]:
        """The ``[[mcp]]`` servers; a :class:`ConfigurationError` names the bad one."""
        servers = []
        for entry in self.mcp:
            try:
                servers.append(entry.server(self.base_dir))
            except ConfigurationError as exc:
                raise ConfigurationError(f"{self.path}: {entry.key}: {exc}") from exc
        return servers

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

    def build_function(self, ref: SessionRef) -> SessionBuild:
        """``build(extra_tools, session_id=None) -> Agent`` for run_autonomous and
        resume_autonomous; tools and the model factory are imported now, so errors show early."""
        return self.builder()(ref)

    def builder(self) -> Callable[[SessionRef], SessionBuild]:
        """:meth:`build_function` in two steps: the tools and the model factory imported now,
        once, for the build functions of many sessions (a daemon's)."""
        tools = self.load_tools()
        servers = self.mcp_servers()
        make_model = self.model_factory()

        def for_session(ref: SessionRef) -> SessionBuild:
            """The build function of the session ``ref``."""
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
                    mcp_servers=servers,
                    **completion,
                )

            return build

        return for_session

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
        if self.retry is not None:
            options["retry_policy"] = self.retry
        options["agent_version"] = self.identity
        return options


def file_identity(path: str | os.PathLike[str]) -> str:
    """The identity of the file at ``path`` as it is now: ``sha256:`` and the hex SHA-256 of
    its bytes (:attr:`AgentSpec.identity`)."""
    with open(path, "rb") as file:
        return "sha256:" + hashlib.file_digest(file, "sha256").hexdigest()


def line_of(key: str, lines: Mapping[str, int]) -> int | None:
    """The line that sets ``key`` (``tools[2]``, ``budgets.max_turns``), or its nearest
    enclosing key's (``tools``, ``budgets``); None when the file sets none of them."""
    while key:
        if key in lines:
            return lines[key]
        cut = key.rindex("[") if key.endswith("]") and "[" in key else key.rfind(".")
        key = key[: max(cut, 0)]
    return None


def problem_at(
    severity: Severity, shown: str, key: str, message: str, lines: Mapping[str, int]
) -> Problem:
    """A problem at ``key`` of the file ``shown``: ``file:line: key`` when the line is known."""
    line = line_of(key, lines) if key else None
    place = shown if line is None else f"{shown}:{line}"
    return Problem(severity, f"{place}: {key}" if key else place, message, line)

"""validate(spec_path): the static checks of an agent spec, as ``autonomous validate`` runs them.

The checks follow the second seed's validation table:

=====================================================================  ========
check                                                                  severity
=====================================================================  ========
the file is missing, unreadable or not TOML; an unknown key             error
``model`` missing; a scripted model factory that cannot be imported     error
no ``instructions`` and no ``steering``                                 warning
a steering or skill file outside the agent's directory, or missing      error
no tools declared (the agent can only answer and call report_done)      warning
a tool that cannot be imported, is not callable or has no docstring     error
two tools with one name, or a tool named like the done/schedule tool    error
an outcome that is blank, repeated or a reserved exit name              error
no budget (max_turns, max_cost_usd, max_wallclock) set                  warning
``max_turns = 0`` with no cost or wall-clock cap: unbounded             warning
no ``per_turn_timeout`` for a litellm model                             warning
``max_cost_usd`` for a litellm model with no price and no ``[pricing]``  error
``max_cost_usd`` for a scripted or local model with no ``[pricing]``     warning
an unknown scheduler kind or permission mode                            error
``ask`` mode with no terminal to prompt on                              warning
``allow`` mode with no allow rules (every tool call is denied)          warning
``api_key_env`` naming a variable that is not set                       warning
an ``[[mcp]]`` command not found (on PATH, or as a path), or its ``cwd``  error
an ``[[mcp]]`` url that is not http or https with a host                error
``[[mcp]]`` tables without the ``[mcp]`` extra installed                error
an ``on_exit`` program not found, or not executable                     error
``on_exit`` with ``AUTONOMOUS_HOOK_TIMEOUT`` not a positive duration      error
a permission rule naming no tool of the spec (not with ``[[mcp]]``,     warning
whose tools are known only once it runs; not a deny glob, a guard)
=====================================================================  ========
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import shutil
import sys
from typing import Any
from urllib.parse import urlsplit

from usage import Pricing

from .._errors import ConfigurationError
from .._options import make_options
from .._steering import check_scoped
from ._hooks import hook_problems
from ._reader import read_spec
from ._refs import scripted_factory, tool_from_ref
from ._spec import AgentSpec, Problem, Severity, problem_at

__all__ = ["unpriced_cap", "validate", "validated_spec"]


def validate(
    spec_path: str | os.PathLike[str], *, interactive: bool | None = None
) -> list[Problem]:
    """Every problem of the spec at ``spec_path``, errors and warnings, without running it.

    ``interactive`` tells whether a terminal can answer an ``ask``-mode gate (default: whether
    standard input is a terminal). Tool and model references are imported (not called).
    """
    return _checked(spec_path, sys.stdin.isatty() if interactive is None else interactive)[1]


def _checked(
    spec_path: str | os.PathLike[str], interactive: bool
) -> tuple[AgentSpec | None, list[Problem]]:
    """The spec (None when unreadable) and every problem of it."""
    spec, problems = read_spec(spec_path)
    if spec is None:
        return None, problems
    where = os.fspath(spec_path)
    for check in (_model, _files, _tools, _mcp, _budgets, _pricing, _options, _on_exit):
        problems.extend(check(spec, where))
    problems.extend(_permissions(spec, where, interactive))
    problems.extend(_rule_targets(spec, where))
    return spec, problems


def _problem(spec: AgentSpec, severity: str, where: str, key: str, message: str) -> Problem:
    """A problem at ``key`` of the spec file ``where`` (as the user named it), with its line."""
    level: Severity = "error" if severity == "error" else "warning"
    return problem_at(level, where, key, message, spec.lines)


def _model(spec: AgentSpec, where: str) -> list[Problem]:
    """The model is usable; the litellm settings and the instructions make sense."""
    found: list[Problem] = []
    if spec.scripted:
        try:
            scripted_factory(spec.model, spec.base_dir)
        except ConfigurationError as exc:
            found.append(_problem(spec, "error", where, "model", str(exc)))
        if spec.litellm:
            found.append(
                _problem(spec, "warning", where, "litellm", "ignored: the model is a scripted one")
            )
    env = spec.litellm.get("api_key_env")
    if env and not spec.scripted and env not in os.environ:
        found.append(
            _problem(
                spec, "warning", where, "litellm.api_key_env", f"{env} is not set in this shell"
            )
        )
    if not spec.instructions.strip() and not (spec.steering or "").strip():
        found.append(
            _problem(
                spec,
                "warning",
                where,
                "instructions",
                "no instructions and no steering: the model gets only the goal",
            )
        )
    return found


def _files(spec: AgentSpec, where: str) -> list[Problem]:
    """Steering and skill files exist inside the agent's directory."""
    found: list[Problem] = []
    for key, paths in (("steering_files", spec.steering_files), ("skill_files", spec.skill_files)):
        for problem in check_scoped(paths, spec.base_dir):
            found.append(
                _problem(spec, problem.severity, where, key, f"{problem.path}: {problem.message}")
            )
    return found


def _tools(spec: AgentSpec, where: str) -> list[Problem]:
    """Every tool imports, is callable and described, and has a name of its own."""
    if not spec.tools and not spec.mcp:
        return [
            _problem(
                spec,
                "warning",
                where,
                "tools",
                "no tools declared: the agent can only answer and call report_done",
            )
        ]
    found: list[Problem] = []
    names: dict[str, str] = {}
    reserved = {spec.run.get("done_tool_name", "report_done")}
    if spec.scheduler is not None:
        reserved.add(spec.run.get("schedule_tool_name", "schedule_next_turn"))
    for i, ref in enumerate(spec.tools):
        key = f"tools[{i}]"
        try:
            tool = tool_from_ref(ref, spec.base_dir)
        except ConfigurationError as exc:
            found.append(_problem(spec, "error", where, key, str(exc)))
            continue
        if tool.name in reserved:
            found.append(
                _problem(spec, "error", where, key, f"{tool.name!r} is the runtime's own tool")
            )
        elif tool.name in names:
            found.append(
                _problem(
                    spec, "error", where, key, f"tool name {tool.name!r} is also {names[tool.name]}"
                )
            )
        names.setdefault(tool.name, ref.ref)
    return found


def _mcp(spec: AgentSpec, where: str) -> list[Problem]:
    """Each MCP server can be reached: its command exists, or its URL is an http(s) one."""
    found: list[Problem] = []
    if spec.mcp and importlib.util.find_spec("mcp") is None:
        why = "the MCP SDK is not installed: pip install 'bounded-autonomous[mcp]'"
        found.append(_problem(spec, "error", where, "mcp", why))
    for entry in spec.mcp:
        key = entry.key
        if entry.url:
            parts = urlsplit(entry.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                why = f"{entry.url!r} is not an http:// or https:// URL with a host"
                found.append(_problem(spec, "error", where, f"{key}.url", why))
            continue
        command = entry.command_path(spec.base_dir)
        if shutil.which(command, path=os.environ.get("PATH")) is None:
            why = f"{entry.command!r} is not an executable on PATH or at that path"
            found.append(_problem(spec, "error", where, f"{key}.command", why))
        if not entry.folder(spec.base_dir).is_dir():
            why = f"{entry.cwd!r} is not a directory (taken from the agent's directory)"
            found.append(_problem(spec, "error", where, f"{key}.cwd", why))
    return found


def _budgets(spec: AgentSpec, where: str) -> list[Problem]:
    """The run is bounded, and a litellm model's turns have a timeout."""
    b = spec.budgets
    caps = [k for k in ("max_turns", "max_cost_usd", "max_wallclock") if b.get(k)]
    found: list[Problem] = []
    if "max_turns" in b and b["max_turns"] == 0 and not caps:
        found.append(
            _problem(
                spec,
                "warning",
                where,
                "budgets",
                "unbounded: max_turns = 0 and no max_cost_usd or max_wallclock",
            )
        )
    elif not caps:
        found.append(
            _problem(
                spec,
                "warning",
                where,
                "budgets",
                "no budget set (max_turns, max_cost_usd, "
                "max_wallclock): only the default max_turns = 50 bounds the run",
            )
        )
    if spec.model and not spec.scripted and not b.get("per_turn_timeout"):
        found.append(
            _problem(
                spec,
                "warning",
                where,
                "budgets.per_turn_timeout",
                "not set: a stuck model call holds its turn until litellm gives up",
            )
        )
    return found


def unpriced_cap(spec: AgentSpec, max_cost_usd: float) -> str | None:
    """Why a cost cap of ``max_cost_usd`` could never trip for ``spec``'s model, or None.

    A litellm model is priced by ``[pricing]`` or by litellm's cost table (read here, which
    imports litellm); without either every call costs $0 and the cap does nothing.
    """
    if not max_cost_usd or spec.pricing is not None or not spec.model or _free(spec):
        return None
    try:
        Pricing.for_model(spec.model)
    except LookupError:
        return (
            f"max_cost_usd = {max_cost_usd:g} can never trip: {spec.model} has no price in "
            "litellm's cost table; add [pricing] or remove max_cost_usd ([pricing] takes "
            "input_per_mtok and output_per_mtok, USD per million tokens)"
        )
    return None


def _free(spec: AgentSpec) -> bool:
    """Whether the model runs here at no cost (scripted, or a local llama.cpp model)."""
    return spec.scripted or spec.model.startswith("local/")


def _pricing(spec: AgentSpec, where: str) -> list[Problem]:
    """A cost cap has prices to count with: a cap that could never trip is an error, as the
    library's run_autonomous refuses it (the same rule everywhere)."""
    cap = float(spec.budgets.get("max_cost_usd", 0))
    if cap and _free(spec) and spec.pricing is None:
        message = (
            "never trips: this model costs nothing unless [pricing] gives it prices; add"
            " [pricing] or remove max_cost_usd"
        )
        return [_problem(spec, "error", where, "budgets.max_cost_usd", message)]
    why = unpriced_cap(spec, cap)
    return [] if why is None else [_problem(spec, "error", where, "budgets.max_cost_usd", why)]


def validated_spec(spec_path: str | os.PathLike[str], *, interactive: bool) -> AgentSpec:
    """The spec at ``spec_path`` when :func:`validate` finds no error in it; else a
    :class:`ConfigurationError` listing every error (warnings are not repeated here)."""
    spec, problems = _checked(spec_path, interactive)
    errors = [p for p in problems if p.severity == "error"]
    if errors or spec is None:
        lines = "\n".join(f"  {p.where}: {p.message}" for p in errors)
        raise ConfigurationError(f"invalid agent spec {os.fspath(spec_path)}:\n{lines}")
    return spec


def _options(spec: AgentSpec, where: str) -> list[Problem]:
    """Whatever RunOptions itself refuses (clashing tool names, a zero lease ttl ...)."""
    try:
        make_options(spec.run_options(prompter=_NoPrompter()))
    except (ConfigurationError, ValueError, TypeError) as exc:
        return [_problem(spec, "error", where, "options", str(exc))]
    return []


def _permissions(spec: AgentSpec, where: str, interactive: bool) -> list[Problem]:
    """An ``ask`` gate has someone to ask; an ``allow`` gate has something to allow."""
    if spec.permission_mode == "allow" and not spec.allow:
        return [
            _problem(
                spec,
                "warning",
                where,
                "permissions.allow",
                "'allow' mode runs only tools an allow rule matches: with no allow rules "
                "every tool call is denied",
            )
        ]
    if spec.permission_mode == "ask" and not interactive:
        return [
            _problem(
                spec,
                "warning",
                where,
                "permissions.mode",
                "'ask' needs someone to answer: with no "
                "terminal (a daemon, a pipe) the run refuses to start",
            )
        ]
    return []


def _on_exit(spec: AgentSpec, where: str) -> list[Problem]:
    """The completion hook can run: its program is there and executable (from the spec's
    directory, or on PATH), and ``AUTONOMOUS_HOOK_TIMEOUT`` is a positive duration."""
    if not spec.on_exit:
        return []
    return [
        _problem(spec, "error", where, "on_exit", why)
        for why in hook_problems(spec.on_exit, spec.base_dir)
    ]


def _rule_targets(spec: AgentSpec, where: str) -> list[Problem]:
    """Each permission rule names some tool: the spec's own, or the runtime's (done and
    schedule tools); a rule that names none is likely a typo.

    Where it cannot know, it says nothing: an MCP server's tools are known only once it runs
    (a rule may name any of them), a tool that did not import has no known name, and a deny
    glob (``rm_*``) is a guard for tools that may come later. An allow glob that matches
    nothing allows nothing, so it is judged.
    """
    if not (spec.allow or spec.deny) or spec.mcp:
        return []
    names: list[str] = []
    for ref in spec.tools:
        try:
            names.append(tool_from_ref(ref, spec.base_dir).name)
        except ConfigurationError:
            return []  # an error already; its name is not known
    names.append(spec.run.get("done_tool_name", "report_done"))
    if spec.scheduler is not None:
        names.append(spec.run.get("schedule_tool_name", "schedule_next_turn"))
    known = ", ".join(dict.fromkeys(names))
    found: list[Problem] = []
    for which, rules in (("allow", spec.allow), ("deny", spec.deny)):
        for i, rule in enumerate(rules):
            if which == "deny" and _is_glob(rule.tool):
                continue
            if not any(fnmatch.fnmatchcase(name, rule.tool) for name in names):
                why = f"{rule.tool!r} matches no tool of this spec ({known}): a typo?"
                found.append(_problem(spec, "warning", where, f"permissions.{which}[{i}]", why))
    return found


def _is_glob(pattern: str) -> bool:
    """Whether a rule's tool is a glob (``*``, ``?`` or ``[``), not one tool's name."""
    return any(c in pattern for c in "*?[")


class _NoPrompter:
    """Stands in for a prompter when the options are only checked, never run."""

    async def __call__(self, request: Any, /) -> bool:
        return False

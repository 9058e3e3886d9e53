"""Agent: a model, its instructions and tools, and the session it writes to."""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from eventlog import SessionRef

from ._errors import ConfigurationError
from ._model import Model
from ._steering import LoadedFiles, Problem, check_scoped, load_scoped
from ._tools._tools import Tool

if TYPE_CHECKING:
    from .mcp import MCPServer

#: The heading of the block the model must always follow.
_STEERING_TITLE = "# Steering (persistent operating context — always follow it)"
#: The heading of the block the model applies when the task calls for it.
_SKILLS_TITLE = "# Skills (apply the following skills/instructions when relevant)"

#: A steering or skill file as declared: a text path, relative to the agent's directory or not.
FilePath = str | os.PathLike[str]


class Agent:
    """What the loop runs: a model (a litellm model string or a :class:`Model`), instructions,
    tools and a session.

    Extra keywords go to ``litellm.acompletion`` (``api_base``, ``api_key``, ``temperature``,
    ``stream`` ...); ``None`` values are dropped. ``session=None`` means an in-memory session.
    Steering (always followed) and skills (applied when relevant) join the system prompt.

    ``steering`` text and ``steering_files`` are persistent operating context; ``skills`` and
    ``skill_files`` are framed as "apply when relevant". Files are markdown, one section per file
    under its file name. They must lie inside ``base_dir``, the agent's own directory (by default
    the working directory when the Agent is made): relative paths are taken from it, and a path
    that resolves outside it (``..``, an absolute path, a symlink) is refused. Files are read when
    :meth:`system_prompt` is built, once per run; a file that is out of scope, missing or
    unreadable is skipped with a warning, never fatal (see :meth:`steering_problems`).

    ``mcp_servers`` (:class:`autonomous.mcp.MCPServer` values, the ``[mcp]`` extra) add the
    tools of MCP servers: a run connects them when it starts and offers their tools beside
    ``tools`` (see :mod:`autonomous.mcp`).
    """

    def __init__(
        self,
        model: str | Model,
        *,
        instructions: str = "",
        tools: Iterable[Tool] = (),
        session: SessionRef | None = None,
        name: str = "agent",
        steering: str | None = None,
        steering_files: Sequence[FilePath] = (),
        skills: Sequence[str] = (),
        skill_files: Sequence[FilePath] = (),
        base_dir: FilePath | None = None,
        mcp_servers: Sequence[MCPServer] = (),
        **completion_kwargs: Any,
    ) -> None:
        kwargs = {k: v for k, v in completion_kwargs.items() if v is not None}
        self.model: Model = _model_of(model, kwargs)
        if not isinstance(instructions, str):
            raise ConfigurationError(f"Agent instructions must be a string, got {instructions!r}")
        self.instructions = instructions
        self.tools: tuple[Tool, ...] = _tools_of(tools)
        if session is not None and not isinstance(session, SessionRef):
            raise ConfigurationError(f"Agent session must be a SessionRef, got {session!r}")
        self.session = session
        self.name = name
        if steering is not None and not isinstance(steering, str):
            raise ConfigurationError(f"Agent steering must be a string or None, got {steering!r}")
        self.steering = steering
        self.steering_files: tuple[FilePath, ...] = _paths_of("steering_files", steering_files)
        self.skills: tuple[str, ...] = _texts_of("skills", skills)
        self.skill_files: tuple[FilePath, ...] = _paths_of("skill_files", skill_files)
        self.base_dir: Path = _base_dir_of(base_dir)
        self.mcp_servers: tuple[MCPServer, ...] = _servers_of(mcp_servers)
        self._problems: tuple[Problem, ...] | None = None

    def system_prompt(self) -> str:
        """The system message: instructions, then steering, then skills.

        Reads the steering and skill files now (the loop calls this once, when a run starts).
        A file that cannot be used is skipped and logged; :meth:`steering_problems` lists it.
        """
        if not (self.steering or self.steering_files or self.skills or self.skill_files):
            self._problems = ()  # the common agent: its instructions are the whole prompt
            return self.instructions.strip()
        steering = load_scoped(self.steering_files, self.base_dir, kind="steering")
        skills = load_scoped(self.skill_files, self.base_dir, kind="skill")
        self._problems = steering.problems + skills.problems
        parts = [self.instructions.strip()] if self.instructions.strip() else []
        inline = [self.steering] if self.steering else []
        parts += _block(_STEERING_TITLE, inline, steering)
        parts += _block(_SKILLS_TITLE, _numbered(self.skills), skills)
        return "\n\n".join(parts)

    def steering_problems(self) -> list[Problem]:
        """The steering and skill files that cannot be used.

        After :meth:`system_prompt`, the files its last build skipped (warnings, as at run time);
        before it, a fresh static check of the declared files (errors, as in validation).
        """
        if self._problems is not None:
            return list(self._problems)
        return [
            *check_scoped(self.steering_files, self.base_dir),
            *check_scoped(self.skill_files, self.base_dir),
        ]

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self.model.name!r}, tools={len(self.tools)})"


#: ``build(extra_tools) -> Agent``, sync or async: what ``run_autonomous`` and
#: ``start_autonomous`` call to make the agent; ``extra_tools`` are the run's own tools (the
#: done tool, and the schedule tool with a scheduler), which the agent's tools must include.
BuildFn = Callable[[list[Tool]], Agent | Awaitable[Agent]]
#: ``build(extra_tools, session_id) -> Agent``, sync or async: what ``resume_autonomous``
#: calls; the agent must be on the session being resumed.
RebuildFn = Callable[[list[Tool], str], Agent | Awaitable[Agent]]


def _model_of(model: object, kwargs: dict[str, Any]) -> Model:
    """The Model for ``model``: a model string (``local/<name>`` runs in this process, any
    other goes to litellm; the client is made lazily) or a Model."""
    if isinstance(model, str):
        if not model.strip():
            raise ConfigurationError("Agent model must be a non-blank litellm model string")
        from ._models import model_for

        return model_for(model, **kwargs)
    if isinstance(model, Model):
        if kwargs:
            raise ConfigurationError(
                f"completion keywords {sorted(kwargs)} only apply to litellm model strings"
            )
        return model
    raise ConfigurationError(f"Agent model must be a string or a Model, got {model!r}")


def _tools_of(tools: Iterable[object]) -> tuple[Tool, ...]:
    """The tools as a tuple: Tool objects only, each name once."""
    checked: list[Tool] = []
    for tool in tools:
        if not isinstance(tool, Tool):
            raise ConfigurationError(f"Agent tools must be Tool objects, got {tool!r}")
        checked.append(tool)
    names = [t.name for t in checked]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigurationError(f"Agent has more than one tool named {', '.join(duplicates)}")
    return tuple(checked)


def _servers_of(servers: object) -> tuple[MCPServer, ...]:
    """The MCP servers as a tuple: MCPServer values only, each name once."""
    if isinstance(servers, str) or not isinstance(servers, Iterable):
        raise ConfigurationError(f"Agent mcp_servers must be a list of MCPServer, got {servers!r}")
    listed = tuple(servers)
    if not listed:
        return ()
    from .mcp import MCPServer  # the [mcp] extra: a user with servers has it

    for server in listed:
        if not isinstance(server, MCPServer):
            raise ConfigurationError(f"Agent mcp_servers must be MCPServer values, got {server!r}")
    names = [s.name for s in listed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigurationError(
            f"Agent has more than one MCP server named {', '.join(duplicates)}: give each "
            "its own name=..."
        )
    return listed


def _texts_of(option: str, values: object) -> tuple[str, ...]:
    """``values`` as a tuple of strings: a list of them, not one string."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise ConfigurationError(f"Agent {option} must be a list of strings, got {values!r}")
    texts = tuple(values)
    for text in texts:
        if not isinstance(text, str):
            raise ConfigurationError(f"Agent {option} must be strings, got {text!r}")
    return texts


def _paths_of(option: str, values: object) -> tuple[FilePath, ...]:
    """``values`` as a tuple of text paths: a list of them, not one path."""
    if isinstance(values, str | bytes | os.PathLike) or not isinstance(values, Iterable):
        raise ConfigurationError(f"Agent {option} must be a list of file paths, got {values!r}")
    paths = tuple(values)
    for path in paths:
        if not _is_text_path(path):
            raise ConfigurationError(f"Agent {option} must be str or path objects, got {path!r}")
    return paths


def _base_dir_of(base_dir: object) -> Path:
    """The agent's own directory, absolute: ``base_dir``, or the working directory now."""
    if base_dir is None:
        return _cwd()
    if not _is_text_path(base_dir):
        raise ConfigurationError(f"Agent base_dir must be a str or path object, got {base_dir!r}")
    return Path(base_dir).resolve()


def _cwd() -> Path:
    """``Path.cwd()``, one shared Path while the working directory stays the same."""
    return _path_of(os.getcwd())


@functools.lru_cache(maxsize=1)
def _path_of(directory: str) -> Path:
    # Agents made in the same directory share one Path (immutable) instead of each parsing one.
    return Path(directory)


def _is_text_path(value: object) -> TypeGuard[FilePath]:
    """Whether ``value`` is a ``str`` or a path-like object that gives a ``str``."""
    if isinstance(value, str):
        return True
    return isinstance(value, os.PathLike) and isinstance(os.fspath(value), str)


def _numbered(skills: Sequence[str]) -> list[str]:
    """Inline skills as sections of their own, numbered in the declared order."""
    return [f"## Skill {n}\n{s.strip()}" for n, s in enumerate(skills, 1) if s.strip()]


def _block(title: str, inline: Sequence[str], loaded: LoadedFiles) -> list[str]:
    """One titled block: the inline texts, then one ``## <filename>`` section per loaded file.

    An empty block (nothing inline, no non-blank file) is left out of the prompt entirely.
    """
    sections = [text.strip() for text in inline if text.strip()]
    sections += [f"## {f.name}\n{f.text.strip()}" for f in loaded.files if f.text.strip()]
    return [title + "\n\n" + "\n\n".join(sections)] if sections else []

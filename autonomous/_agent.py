"""Agent: a model, its instructions and tools, and the session it writes to."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eventlog import SessionRef

from ._errors import ConfigurationError
from ._model import Model
from ._tools import Tool


class Agent:
    """What the loop runs: a model (a litellm model string or a :class:`Model`), instructions,
    tools and a session.

    Extra keywords go to ``litellm.acompletion`` (``api_base``, ``api_key``, ``temperature``,
    ``stream`` ...); ``None`` values are dropped. ``session=None`` means an in-memory session.
    Steering (always followed) and skills (applied when relevant) join the system prompt.
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
        skills: Iterable[str] = (),
        **completion_kwargs: Any,
    ) -> None:
        kwargs = {k: v for k, v in completion_kwargs.items() if v is not None}
        if isinstance(model, str):
            if not model.strip():
                raise ConfigurationError("Agent model must be a non-blank litellm model string")
            from ._litellm import LiteLLMModel

            self.model: Model = LiteLLMModel(model, **kwargs)
        elif isinstance(model, Model):
            if kwargs:
                raise ConfigurationError(
                    f"completion keywords {sorted(kwargs)} only apply to litellm model strings"
                )
            self.model = model
        else:
            raise ConfigurationError(f"Agent model must be a string or a Model, got {model!r}")
        self.instructions = instructions
        self.tools: tuple[Tool, ...] = tuple(tools)
        names = [t.name for t in self.tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigurationError(f"Agent has more than one tool named {', '.join(duplicates)}")
        for tool in self.tools:
            if not isinstance(tool, Tool):
                raise ConfigurationError(f"Agent tools must be Tool objects, got {tool!r}")
        if session is not None and not isinstance(session, SessionRef):
            raise ConfigurationError(f"Agent session must be a SessionRef, got {session!r}")
        self.session = session
        self.name = name
        self.steering = steering
        self.skills: tuple[str, ...] = tuple(skills)

    def system_prompt(self) -> str:
        """The system message: instructions, then steering, then skills."""
        parts = [self.instructions.strip()] if self.instructions.strip() else []
        if self.steering and self.steering.strip():
            parts.append(
                "## Steering (persistent operating context — always follow it)\n"
                + self.steering.strip()
            )
        if self.skills:
            parts.append(
                "## Skills (apply the following skills/instructions when relevant)\n"
                + "\n\n".join(s.strip() for s in self.skills)
            )
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self.model.name!r}, tools={len(self.tools)})"

"""The autonomous error tree.

AutonomousError
├── ConfigurationError   a misuse caught at once: blank goal, no build, bad option (ValueError)
│   └── GateWouldDeadlock    a gate that would prompt with nobody to answer
├── RunFinished          pause / resume / inject after the run ended (RuntimeError)
├── BuildError           the build function failed or returned something that is not an Agent
├── MCPServerError       an MCP server of the agent could not be started or reached at run start
└── TurnError            a turn failed; the retry policy decides what follows
    ├── ModelError           the model call failed (litellm's error is the __cause__)
    ├── TurnTimeout          the turn outlived per_turn_timeout
    ├── ModelCallLimit       the model kept calling tools past max_model_calls_per_turn
    └── ToolTimeoutError     a tool marked fatal_timeout outlived its timeout
"""

from __future__ import annotations

import permissions as _permissions


class AutonomousError(Exception):
    """Root of every error the autonomous package raises."""


class ConfigurationError(AutonomousError, ValueError):
    """A misuse caught before the run starts: the message names the option and the fix."""


class GateWouldDeadlock(ConfigurationError, _permissions.GateWouldDeadlock):
    """The permission gate could prompt but has no prompter: the first tool call would hang.

    Also a :class:`permissions.GateWouldDeadlock`, so either ``except`` catches it.
    """


class RunFinished(AutonomousError, RuntimeError):
    """The run has ended; pause, resume and inject are no longer possible."""


class BuildError(AutonomousError):
    """The build function failed (the original error is the ``__cause__``) or returned no Agent."""


class MCPServerError(AutonomousError):
    """An MCP server of the agent could not be started, or did not answer, when the run
    started; the message names the server (the original error is the ``__cause__``)."""

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


class TurnError(AutonomousError):
    """A turn failed; the retry policy decides between abort, retry and skip."""


class ModelError(TurnError):
    """The model call failed; the provider's error is the ``__cause__``.

    ``status`` is the HTTP status the provider answered with (None when there was no answer,
    or the failure was not the server's), ``retry_after`` the seconds its ``Retry-After``
    header asked for (None without one): what a retry policy such as
    :func:`autonomous.retry.transient` decides by.
    """

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class TurnTimeout(TurnError):
    """The turn ran past ``per_turn_timeout``."""


class ModelCallLimit(TurnError):
    """The model kept asking for tools past ``max_model_calls_per_turn`` model calls in one turn."""


class ToolTimeoutError(TurnError):
    """A tool marked ``fatal_timeout`` ran past its timeout, so the turn failed."""

"""The driver of a bounded autonomous agent: start/run/resume, the handle, Agent, tools, CLI.

Importing it imports neither litellm (seconds: only a litellm model's use does, in _models/)
nor the command's modules (only running the command does): see bench/startup.py.

Map. The top level holds the vocabulary a user meets (the errors, the model protocol and its
messages, results, progress events, Agent and RunOptions); spec files, local models and the
testing helpers have public modules of their own; the machinery lives in folders by
concept, each importing only from the ones listed before it (tests/test_structure.py):
    _errors.py        the error tree (AutonomousError at the root)
    _logging.py       the library's loggers: the program's structlog set-up, else stdlib logging
    _clash.py         the check at import that eventlog, usage, ... are ours, not PyPI namesakes
    _text.py          cleaning model and tool text at the edges (lone surrogates)
    _model.py         the Model protocol and the message types
    _result.py        StopReason, AutonomousStatus, RetryDecision, RunResult
    _callers.py       permissions.Caller from the originator recorded with an inbox message
    _progress.py      typed progress events and their fan-out to the callback and streams
    retry.py          public: retry policies (transient: HTTP 429/5xx and timeouts, with backoff)
    _tools/           tools, their pydantic schemas and results, the exit tools
    _observe/         the observer (one emit), telemetry, supervisors and the LLM judge
    _agent.py         Agent
    _steering.py      steering and skill files, scoped to the agent's directory
    _options.py       RunOptions (every keyword option, validated) and RunKwargs (their types)
    _state/           the run's state folded from its log: History, the conversation, RunState
    _control/         pause, resume, stop, inject and wake: RunControls, the inbox, send_control
    _durable/         the session lease and log watch; restoring a run from its log
    _run/             the entry points, the handle, a run's lifecycle, the loop, a turn, next_step
    __main__.py       python -m autonomous: the command
Its edges, sub-packages the core is imported by (or, for the models, reaches only through
model_for and output_limit):
    _models/          the model edge: litellm, local llama.cpp models
    local.py          public: local llama.cpp models (register_local_models), from _models/
    mcp/              public, the [mcp] extra: MCPServer, MCP servers' tools as a run's tools
    spec/             public: agent spec files (AgentSpec, load_spec, validate_spec)
    _cli/             the `autonomous` command and its daemon (they run spec files)
    testing/          public: ScriptedModel, ScriptedServer and their steps, FakeClock
    server/           public, the [server] extra: the HTTP control API (create_app)
    fleet/            public: Daemon, the `autonomous daemon` as a library object; AdoptedLease
"""

import importlib
from typing import Any

# First, before anything imports eventlog, usage, permissions or scheduler: importing _clash
# checks that they are ours (a PyPI namesake installed over one is named in one line).
from . import (
    _clash,  # noqa: F401
    retry,
)
from ._agent import Agent, BuildFn, RebuildFn
from ._control._remote import send_control, send_inject
from ._errors import (
    AutonomousError,
    BuildError,
    ConfigurationError,
    GateWouldDeadlock,
    MCPServerError,
    ModelCallLimit,
    ModelError,
    RunFinished,
    ToolTimeoutError,
    TurnError,
    TurnTimeout,
)
from ._model import Message, Model, ModelResponse, ToolCall
from ._observe._judge import LLMJudge
from ._observe._supervisor import (
    AbortRun,
    PauseRun,
    Proceed,
    RulesSupervisor,
    Steer,
    Supervisor,
    SupervisorDecision,
    SupervisorSnapshot,
)
from ._observe._telemetry import Telemetry
from ._options import RunKwargs, RunOptions
from ._progress import (
    CheckpointWritten,
    HistorySummarized,
    ModelCalled,
    ModelCalling,
    Paused,
    ProgressEvent,
    Resumed,
    RunExited,
    Sleeping,
    ToolCalled,
    ToolCalling,
    TurnFinished,
    TurnStarted,
    Woke,
)
from ._result import AutonomousStatus, RetryDecision, RunResult, StopReason
from ._run._driver import resume_autonomous, run_autonomous, start_autonomous
from ._run._handle import AutonomousHandle
from ._tools._tool_result import ToolOutcome
from ._tools._tools import (
    Tool,
    ToolArgumentError,
    ToolCallContext,
    current_tool_call,
    function_tool,
)

__all__ = [
    "AbortRun",
    "Agent",
    "AutonomousError",
    "AutonomousHandle",
    "AutonomousStatus",
    "BuildError",
    "BuildFn",
    "CheckpointWritten",
    "ConfigurationError",
    "GateWouldDeadlock",
    "HistorySummarized",
    "LLMJudge",
    "MCPServerError",
    "Message",
    "Model",
    "ModelCallLimit",
    "ModelCalled",
    "ModelCalling",
    "ModelError",
    "ModelResponse",
    "PauseRun",
    "Paused",
    "Proceed",
    "ProgressEvent",
    "RebuildFn",
    "Resumed",
    "RetryDecision",
    "RulesSupervisor",
    "RunExited",
    "RunFinished",
    "RunKwargs",
    "RunOptions",
    "RunResult",
    "Sleeping",
    "Steer",
    "StopReason",
    "Supervisor",
    "SupervisorDecision",
    "SupervisorSnapshot",
    "Telemetry",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolCallContext",
    "ToolCalled",
    "ToolCalling",
    "ToolOutcome",
    "ToolTimeoutError",
    "TurnError",
    "TurnFinished",
    "TurnStarted",
    "TurnTimeout",
    "Woke",
    "current_tool_call",
    "function_tool",
    "resume_autonomous",
    "retry",
    "run_autonomous",
    "send_control",
    "send_inject",
    "start_autonomous",
]

#: Names that moved from here to a public module of their own, by the module they are in now:
#: still found here (see :func:`__getattr__`) for programs written before, though not exported.
_MOVED = {
    "AdoptedLease": "autonomous.fleet",
    "AgentSpec": "autonomous.spec",
    "SpecProblem": "autonomous.spec",
    "load_spec": "autonomous.spec",
    "validate_spec": "autonomous.spec",
    "LocalModelUnavailable": "autonomous.local",
    "register_local_models": "autonomous.local",
}


def __getattr__(name: str) -> Any:
    """A name in :data:`_MOVED`, from its new module, silently (programs written before keep
    working; the name stays out of ``__all__`` and ``dir()``)."""
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

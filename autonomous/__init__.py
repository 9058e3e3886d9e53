"""The driver of a bounded autonomous agent: start/run/resume, the handle, Agent, tools, CLI.

Map:
    _driver.py        run_autonomous, start_autonomous, resume_autonomous (the entry points)
    _run.py           the loop of one run: budgets, hooks, pause, inbox, checkpoints, exits
    _turn.py          one turn: model calls and tool calls, budgets between model calls
    _decide.py        the loop's decisions as pure functions (budgets, next step, wake clamp)
    _handle.py        AutonomousHandle
    _agent.py         Agent
    _model.py         the Model protocol; _litellm.py the litellm implementation
    _tools.py         Tool, function_tool, argument parsing, call contexts (idempotency keys)
    _results.py       a tool call's value or error as the text the model reads
    _text.py          cleaning model and tool text at the edges (lone surrogates)
    _control.py       the done tool and the schedule tool
    _conversation.py  the messages the model sees and the events that record them
    _inbox.py         the inbox and the wake signal
    _progress.py      typed progress events and their fan-out
    _options.py       RunOptions (every keyword option, validated)
    _result.py        StopReason, AutonomousStatus, RetryDecision, RunResult
    _remote.py        send_inject / send_control: control a session through its event log
    _controls.py      pause / resume / stop / inject / wake, from the handle or the log
    _durable.py       the session lease, the log watcher, the resume wait
    _restore.py       rebuilding a run from its session's log (unfinished turns included)
    _session_state.py a session's state from outside a run: completed, stopped, the horizon
    _conversation_rules.py  what OpenAI refuses in a request (the scripted model and server)
    _loop.py          the turn loop (functions over a Run)
    _supervisor.py    supervisors: decisions, rules, the snapshot they see; _judge.py the LLM judge
    _telemetry.py     OpenTelemetry spans and counters (optional)
    _steering.py      steering and skill files, scoped to the agent's directory
    _spec.py, _cli*.py  agent spec files and the `autonomous` command
    _local.py         local/<name> models: litellm provider registration, LocalModel
    _local_engine.py  the llama.cpp engine behind them: weights, tool prompts, tool-call parsing
    _errors.py        the error tree (AutonomousError at the root)
    testing.py        ScriptedModel and helpers for users' own tests
    _scripted_server.py  the scripted OpenAI-compatible HTTP server (testing.ScriptedServer)
    _scripted_steps.py   the steps it plays (reply, call, error, hang ...) and their JSON/SSE bodies
"""

from ._agent import Agent
from ._cli_validate import validate as validate_spec
from ._driver import resume_autonomous, run_autonomous, start_autonomous
from ._errors import (
    AutonomousError,
    BuildError,
    ConfigurationError,
    GateWouldDeadlock,
    ModelCallLimit,
    ModelError,
    RunFinished,
    ToolTimeoutError,
    TurnError,
    TurnTimeout,
)
from ._handle import AutonomousHandle
from ._local import LocalModelUnavailable, register_local_models
from ._model import Message, Model, ModelResponse, ToolCall
from ._options import RunOptions
from ._progress import (
    CheckpointWritten,
    ModelCalled,
    Paused,
    ProgressEvent,
    Resumed,
    RunExited,
    ToolCalled,
    TurnFinished,
    TurnStarted,
    Woke,
)
from ._remote import send_control, send_inject
from ._result import AutonomousStatus, RetryDecision, RunResult, StopReason
from ._spec import AgentSpec, load_spec
from ._spec import Problem as SpecProblem
from ._supervisor import (
    AbortRun,
    LLMJudge,
    PauseRun,
    Proceed,
    RulesSupervisor,
    Steer,
    Supervisor,
    SupervisorDecision,
    SupervisorSnapshot,
)
from ._telemetry import Telemetry
from ._tools import Tool, ToolArgumentError, ToolCallContext, current_tool_call, function_tool

__all__ = [
    "AbortRun",
    "Agent",
    "AgentSpec",
    "AutonomousError",
    "AutonomousHandle",
    "AutonomousStatus",
    "BuildError",
    "CheckpointWritten",
    "ConfigurationError",
    "GateWouldDeadlock",
    "LLMJudge",
    "LocalModelUnavailable",
    "Message",
    "Model",
    "ModelCallLimit",
    "ModelCalled",
    "ModelError",
    "ModelResponse",
    "PauseRun",
    "Paused",
    "Proceed",
    "ProgressEvent",
    "Resumed",
    "RetryDecision",
    "RulesSupervisor",
    "RunExited",
    "RunFinished",
    "RunOptions",
    "RunResult",
    "SpecProblem",
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
    "ToolTimeoutError",
    "TurnError",
    "TurnFinished",
    "TurnStarted",
    "TurnTimeout",
    "Woke",
    "current_tool_call",
    "function_tool",
    "load_spec",
    "register_local_models",
    "resume_autonomous",
    "run_autonomous",
    "send_control",
    "send_inject",
    "start_autonomous",
    "validate_spec",
]

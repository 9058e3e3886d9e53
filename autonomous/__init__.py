"""The driver of a bounded autonomous agent: start/run/resume, the handle, Agent, tools, CLI.

Importing it imports neither litellm (seconds: only a litellm model's use does, in _models/)
nor the command's modules (only running the command does): see bench/startup.py.

Map (the core is flat here; its edges are the sub-packages at the end):
    _driver.py        run_autonomous, start_autonomous, resume_autonomous (the entry points)
    _run.py           one run's lifecycle: build, session, lease, resume, exits, checkpoints
    _run_state.py     RunState: the run's state as one value (to and from checkpoints, results)
    _loop.py          the turn loop over a RunState, handed its parts (LoopDeps): turns, the waits
    _turn.py          one turn: model calls and tool calls, budgets between model calls
    _decide.py        the loop's decisions as pure functions (budgets, next step, wake clamp)
    _handle.py        AutonomousHandle
    _agent.py         Agent
    _model.py         the Model protocol and the message types
    _tools.py         Tool, function_tool, argument parsing, call contexts (idempotency keys)
    _tool_table.py    ToolTable: a run's tools when MCP servers add to the agent's own
    _schema.py        JSON schemas from type hints
    _tool_result.py   ToolOutcome, and a tool call's value or error as the text the model reads
    _text.py          cleaning model and tool text at the edges (lone surrogates)
    _exit_tools.py    the exit tools: the done tool and the schedule tool
    _control_requests.py  RunControls: pause, resume, stop, inject, wake; ControlAction
    _history.py       History: the conversation as one fold of events (live and on resume); the
                      window (cut in blocks, window_start)
    _conversation.py  the run's conversation: the events it records, applied to its History
    _inbox.py         the inbox and the wake signal
    _progress.py      typed progress events and their fan-out to the callback and streams
    _observer.py      one observer per run: each event once, to log, progress, supervisor, telemetry
    _options.py       RunOptions (every keyword option, validated) and RunKwargs (their types)
    _result.py        StopReason, AutonomousStatus, RetryDecision, RunResult
    _remote.py        send_inject / send_control: control a session through its event log
    _durable.py       the session lease (or one lent: AdoptedLease), its heartbeat, the log watch
    _restore.py       rebuilding a run from its session's log: reads, then folds the history
    _session_state.py a session's state from outside a run: completed, stopped, the horizon
    _summary.py       summaries of the turns the history window cuts (history_summary_model)
    _supervisor.py    supervisors: decisions, rules, the snapshot they see; _judge.py the LLM judge
    _telemetry.py     OpenTelemetry GenAI spans, histograms and counters (optional); trace_context
    _genai_content.py messages and tool content as the GenAI conventions shape them (opt-in)
    _steering.py      steering and skill files, scoped to the agent's directory
    _callers.py       permissions.Caller from the originator recorded with an inbox message
    _errors.py        the error tree (AutonomousError at the root)
    _clash.py         the check at import that eventlog, usage, ... are ours, not PyPI namesakes
    _logging.py       the library's loggers: the program's structlog set-up, else stdlib logging
    __main__.py       python -m autonomous: the command
    retry.py          public: retry policies (transient: HTTP 429/5xx and timeouts, with backoff)
    _models/          the model edge: litellm, local llama.cpp models
    mcp/              public, the [mcp] extra: MCPServer, MCP servers' tools as a run's tools
    _cli/             the `autonomous` command, agent spec files, validation
    testing/          public: ScriptedModel, ScriptedServer and their steps, FakeClock
"""

# First, before anything imports eventlog, usage, permissions or scheduler: importing _clash
# checks that they are ours (a PyPI namesake installed over one is named in one line).
from . import (
    _clash,  # noqa: F401
    retry,
)
from ._agent import Agent, BuildFn, RebuildFn
from ._cli._spec import AgentSpec
from ._cli._spec import Problem as SpecProblem
from ._cli._spec_reader import load_spec
from ._cli._validate import validate as validate_spec
from ._driver import resume_autonomous, run_autonomous, start_autonomous
from ._durable import AdoptedLease
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
from ._handle import AutonomousHandle
from ._judge import LLMJudge
from ._model import Message, Model, ModelResponse, ToolCall
from ._models._local import LocalModelUnavailable, register_local_models
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
from ._remote import send_control, send_inject
from ._result import AutonomousStatus, RetryDecision, RunResult, StopReason
from ._supervisor import (
    AbortRun,
    PauseRun,
    Proceed,
    RulesSupervisor,
    Steer,
    Supervisor,
    SupervisorDecision,
    SupervisorSnapshot,
)
from ._telemetry import Telemetry
from ._tool_result import ToolOutcome
from ._tools import Tool, ToolArgumentError, ToolCallContext, current_tool_call, function_tool

__all__ = [
    "AbortRun",
    "AdoptedLease",
    "Agent",
    "AgentSpec",
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
    "LocalModelUnavailable",
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
    "load_spec",
    "register_local_models",
    "resume_autonomous",
    "retry",
    "run_autonomous",
    "send_control",
    "send_inject",
    "start_autonomous",
    "validate_spec",
]

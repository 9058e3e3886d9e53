"""The run's outcome values: stop reasons, statuses, retry decisions and the RunResult."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import attrs


class StopReason(enum.StrEnum):
    """Why a run returned; the values are the Go package's, plus ``lease_lost`` and ``aborted``.

    ``lease_lost``: another process took the session lease over (our lease expired); the run
    stopped without writing anything more. ``aborted``: a supervisor aborted the run.
    """

    COMPLETED = "completed"
    MAX_TURNS_EXCEEDED = "max_turns_exceeded"
    MAX_TOKENS_EXCEEDED = "max_tokens_exceeded"
    MAX_COST_EXCEEDED = "max_cost_exceeded"
    WALLCLOCK_EXCEEDED = "wallclock_exceeded"
    CONTEXT_CANCELLED = "context_cancelled"
    RETRY_POLICY_ABORTED = "retry_policy_aborted"
    DEFERRED = "deferred"
    LEASE_LOST = "lease_lost"
    ABORTED = "aborted"


class AutonomousStatus(enum.StrEnum):
    """The lifecycle state of a started run, as ``AutonomousHandle.status`` reports it."""

    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    COMPLETED = "completed"
    FAILED = "failed"
    DEFERRED = "deferred"


class RetryDecision(enum.Enum):
    """What the retry policy tells the driver to do after a turn error."""

    ABORT_RUN = "abort_run"
    RETRY_TURN = "retry_turn"
    SKIP_TURN = "skip_turn"


@attrs.frozen
class RunResult:
    """The structured outcome of a run; returned for every stop reason, never raised.

    ``turns`` counts every turn executed, failed attempts included. ``duration`` is this
    process's wall-clock seconds (a resumed run starts it again). ``error`` holds the turn, hook
    or scheduler error behind ``retry_policy_aborted``. ``outcome`` and ``result`` carry the
    done tool's choice when an outcome set is declared. ``abort_reason`` says why a run ended
    ``aborted`` (the supervisor's reason, or a pause that outlived ``pause_max``).
    ``undelivered`` holds the texts of inbox messages that were acknowledged but never shown
    to the model (a budget ran out first): the log keeps them for the next resume.
    ``cached_input_tokens`` is the part of ``input_tokens`` the provider read from its prompt
    cache (billed at its cached rate); both carry over a resume, like the cost.
    """

    reason: StopReason
    final_text: str = ""
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    duration: float = 0.0
    done_detail: str = ""
    next_wake_at: datetime | None = None
    error: BaseException | None = attrs.field(default=None, eq=False)
    outcome: str | None = None
    result: Any = None
    session_id: str = ""
    abort_reason: str = ""
    undelivered: tuple[str, ...] = ()
    cached_input_tokens: int = 0

"""The event types of the log: one frozen attrs class per payload, one envelope for all."""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime
from typing import Any, TypeAlias

import attrs

from ._errors import InvalidSessionKey

#: The schema version written with every event; reading any other version fails fast.
SCHEMA_VERSION = 1


class EventKind(enum.StrEnum):
    """What an event records. The payload class follows from the kind."""

    USER_MESSAGE = "user_message"
    ASSISTANT_MESSAGE = "assistant_message"
    TOOL_RESULT = "tool_result"
    INBOX_QUEUED = "inbox_queued"
    INBOX_DELIVERED = "inbox_delivered"
    CONTROL = "control"
    SCHEDULE = "schedule"
    CHECKPOINT = "checkpoint"
    PERMISSION = "permission"
    NOTE = "note"
    HISTORY_SUMMARY = "history_summary"
    BUDGETS = "budgets"


#: The most characters (Unicode code points) each part of a session key (``app``, ``user``,
#: ``session_id``) may have. PostgreSQL indexes the three together, and an index entry holds
#: at most 2,704 bytes (a third of an 8 KiB page, less its overhead); a character takes at
#: most four bytes there (one beyond U+FFFF, or U+0000 and U+0010, which it stores escaped as
#: two characters). Three parts of 200 such characters make an entry of 2,420 bytes.
MAX_KEY_LENGTH = 200

_KEY_PARTS = ("app", "user", "session_id")


@attrs.frozen
class SessionKey:
    """The identity of one session inside a log: (app, user, session_id).

    Each part is any text (``/``, ``..``, U+0000 and emoji included) of at most
    :data:`MAX_KEY_LENGTH` characters; every store refuses a longer part, or one that is not
    text it can store (a lone surrogate), with :class:`~eventlog.InvalidSessionKey` before it
    writes anything (an append, a lease), and so does :class:`~eventlog.SessionRef` when it is
    made. A key is not checked when it is made, so that a log written before the limit can
    still be read.
    """

    app: str
    user: str
    session_id: str

    def __str__(self) -> str:
        return f"{self.app}/{self.user}/{self.session_id}"


def check_key(key: SessionKey) -> None:
    """Refuse a key no store takes (:class:`InvalidSessionKey`): a part that is not a ``str``,
    is longer than :data:`MAX_KEY_LENGTH` characters, or holds a lone surrogate (no UTF-8)."""
    for name in _KEY_PARTS:
        part = getattr(key, name)
        if not isinstance(part, str):
            raise InvalidSessionKey(name, f"must be text, not {type(part).__name__}")
        if len(part) > MAX_KEY_LENGTH:
            raise InvalidSessionKey(
                name,
                f"has {len(part):,} characters ({part[:20]!r}...), more than the"
                f" {MAX_KEY_LENGTH} a part may have",
            )
        if not part.isascii():
            try:
                part.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidSessionKey(
                    name, f"is not text a store can hold: {exc.reason} at index {exc.start}"
                ) from None


@attrs.frozen
class Originator:
    """Who sent an inbox message or a control request (a copy of the caller, kept by value)."""

    identity: str = ""
    labels: dict[str, str] = attrs.field(factory=dict)
    admin: bool = False


@attrs.frozen
class ToolCallRecord:
    """One tool call the model asked for, as the model sent it (arguments are raw JSON text)."""

    call_id: str
    name: str
    arguments: str


@attrs.frozen
class UserMessage:
    """The prompt of one turn as the model saw it (inbox block included).

    ``inbox_ids`` are the message ids of the inbox messages the prompt carries.
    """

    text: str
    turn: int
    inbox_ids: tuple[str, ...] = ()


@attrs.frozen
class AssistantMessage:
    """One model answer, with the usage and cost of the model call that produced it."""

    text: str
    turn: int
    tool_calls: tuple[ToolCallRecord, ...] = ()
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0


@attrs.frozen
class ToolResult:
    """What a tool call returned to the model.

    ``outcome`` is ok, error, timeout, denied or rejected.
    """

    call_id: str
    name: str
    content: str
    turn: int
    outcome: str = "ok"


@attrs.frozen
class InboxQueued:
    """A message injected into a session's inbox, durable before ``inject`` returns."""

    message_id: str
    text: str
    caller: Originator | None = None


@attrs.frozen
class InboxDelivered:
    """Inbox messages that reached the model in a turn that finished."""

    message_ids: tuple[str, ...]
    turn: int


@attrs.frozen
class Control:
    """A control request or note: pause, resume, stop or wake."""

    action: str
    caller: Originator | None = None
    detail: str = ""


@attrs.frozen
class Schedule:
    """The model asked to be woken at ``wake_at`` with ``next_prompt``.

    The runtime itself keeps a schedule in the turn's checkpoint (``next_wake_at``,
    ``next_prompt``) and does not append this payload; the kind stays one the log stores and
    reads, for programs that record schedules of their own.
    """

    wake_at: datetime
    turn: int
    next_prompt: str = ""
    detail: str = ""


@attrs.frozen
class Budgets:
    """The hard limits a session runs under (0 = no cap): its turns, input and output tokens,
    dollars, and the wall-clock seconds of each run.

    A session's budgets are its own: a run records them when it starts the session (an event of
    this kind, and every checkpoint after it carries them), and a change (a resume given other
    budgets, an operator raising one) is an event of this kind too, whose author says who made
    it. Every later run goes on under the budgets recorded last.
    """

    max_turns: int = 0
    max_input_tokens: int = 0
    max_output_tokens: int = 0
    max_cost_usd: float = 0.0
    max_wallclock: float = 0.0


@attrs.frozen
class Checkpoint:
    """The run's state after a turn or at an exit: totals, the next prompt, and the wake time.

    ``stop_reason`` is ``None`` while the run goes on; a run that ended writes the reason.
    ``turn_failed`` marks the checkpoint of a failed attempt; its conversation events stay part
    of the history (logs written before this release cut them, and a resume reads them as well
    formed history all the same), and ``open_turn`` names the turn that goes on after it (0:
    none): a retry continues it from what the failed attempt left. ``error`` is the failure
    behind the turn (``Type: message``, bounded, secrets masked; "" when none).
    ``failed_attempts`` counts consecutive failures of the current turn (the retry policy's
    ``attempt``). ``goal`` is the run's first prompt (kept in every window of history).
    ``inbox_from_seq`` is the seq of the oldest inbox message not yet delivered (0: none), so a
    resume reads the inbox from there. ``paused``: the run was parked by a pause when it wrote
    this. ``stopped``: the run was stopped on purpose by a stop request (a resume needs force).
    ``unseen_from`` is the first log seq whose inbox and control events the run had not read
    when it wrote this (0: not known): a resume obeys what came from there on, even before the
    checkpoint. ``unpriced``: the run had no prices for its model (no ``pricing``, not in
    litellm's table), so ``cost_usd`` counts nothing; ``autonomous ls`` says so rather than show
    $0. ``agent_version`` is what defined the agent that wrote it (the run option of that name:
    the CLI puts its spec file's digest there), so a worker can tell whether it would run the
    same agent ("" when unsaid); the schema version is the event's own ``v``.
    ``cached_input_tokens``: the part of ``input_tokens`` read from the provider's prompt cache
    (0 in checkpoints written before it). ``budgets`` are the session's budgets when it was
    written (None in checkpoints written before budgets were recorded).
    """

    turns: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    next_prompt: str
    stop_reason: str | None = None
    next_wake_at: datetime | None = None
    done_detail: str = ""
    final_text: str = ""
    outcome: str | None = None
    result: Any = None
    model_calls: int = 0
    turn_failed: bool = False
    failed_attempts: int = 0
    goal: str = ""
    inbox_from_seq: int = 0
    paused: bool = False
    stopped: bool = False
    unseen_from: int = 0
    unpriced: bool = False
    agent_version: str = ""
    cached_input_tokens: int = 0
    budgets: Budgets | None = None
    error: str = ""
    open_turn: int = 0


@attrs.frozen
class PermissionDecision:
    """The permission gate's answer to one tool call: ``tool`` is the name it was called by,
    ``aliases`` the other names the gate's rules were tried on (an MCP tool's name on its
    server, ``{server}__{tool}``)."""

    tool: str
    allowed: bool
    reason: str
    turn: int
    caller: Originator | None = None
    mode: str = ""
    aliases: tuple[str, ...] = ()


@attrs.frozen
class HistorySummary:
    """A summary of the turns a history window cut, written by a cheap model.

    It covers turns ``first_turn`` to ``last_turn`` (the summary before it folded in: the
    latest one stands for every turn cut so far), written at the start of turn ``turn`` by
    ``model``, with that call's usage and cost (they count in the run's totals).
    """

    text: str
    first_turn: int
    last_turn: int
    turn: int
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0


@attrs.frozen
class Note:
    """Free-form audit text with optional structured data."""

    text: str
    data: dict[str, Any] = attrs.field(factory=dict)


Payload: TypeAlias = (
    UserMessage
    | AssistantMessage
    | ToolResult
    | InboxQueued
    | InboxDelivered
    | Control
    | Schedule
    | Checkpoint
    | PermissionDecision
    | Note
    | HistorySummary
    | Budgets
)

PAYLOAD_TYPES: dict[EventKind, type[Any]] = {
    EventKind.USER_MESSAGE: UserMessage,
    EventKind.ASSISTANT_MESSAGE: AssistantMessage,
    EventKind.TOOL_RESULT: ToolResult,
    EventKind.INBOX_QUEUED: InboxQueued,
    EventKind.INBOX_DELIVERED: InboxDelivered,
    EventKind.CONTROL: Control,
    EventKind.SCHEDULE: Schedule,
    EventKind.CHECKPOINT: Checkpoint,
    EventKind.PERMISSION: PermissionDecision,
    EventKind.NOTE: Note,
    EventKind.HISTORY_SUMMARY: HistorySummary,
    EventKind.BUDGETS: Budgets,
}
KIND_OF: dict[type[Any], EventKind] = {cls: kind for kind, cls in PAYLOAD_TYPES.items()}


def new_event_id() -> str:
    """A unique event id: a random UUID (version 4) as 32 hex digits."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


@attrs.frozen
class Event:
    """One entry of the append-only log.

    ``seq`` is the number the log gave the event (increasing across the log): events read from
    a log carry it, ``append`` returns it, and the event objects given to ``append`` keep
    ``seq == 0``. Build events with :meth:`Event.create`.
    """

    key: SessionKey
    kind: EventKind
    payload: Payload
    author: str = ""
    at: datetime = attrs.field(factory=utcnow)
    id: str = attrs.field(factory=new_event_id)
    seq: int = 0
    v: int = SCHEMA_VERSION

    @classmethod
    def create(
        cls, key: SessionKey, payload: Payload, *, author: str = "", at: datetime | None = None
    ) -> Event:
        """A new, not yet appended event whose kind follows from ``payload``'s type."""
        # Positional, no factories: this runs twice per model call.
        return cls(
            key,
            KIND_OF[type(payload)],
            payload,
            author,
            at if at is not None else datetime.now(UTC),
            new_event_id(),
        )

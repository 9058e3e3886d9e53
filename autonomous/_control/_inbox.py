"""The run's inbox and wake signal: messages waiting for the next turn, and what wakes a sleep."""

from __future__ import annotations

import asyncio
import threading

import anyio
import attrs

from eventlog import Event, InboxQueued, Originator, SessionKey, new_event_id

from .._errors import ConfigurationError


@attrs.frozen
class InboxMessage:
    """One injected message, durable in the log before it is queued here."""

    message_id: str
    text: str
    caller: Originator | None = None
    seq: int = 0


def check_inject(text: object) -> None:
    """Refuse what cannot be injected: anything but a non-blank string."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError("inject needs a non-blank message")


def author_of(via: str, caller: Originator | None) -> str:
    """The author of an event sent ``via`` a channel (``handle``, ``remote``...) by ``caller``:
    the channel, then the caller's identity when it has one."""
    who = caller.identity if caller is not None and caller.identity else ""
    return f"{via}:{who}" if who else via


def inject_event(
    key: SessionKey, text: str, caller: Originator | None, *, via: str
) -> tuple[str, Event]:
    """The event that queues ``text`` in ``key``'s inbox, and its new message id: the one way
    an inject is written, by the run's handle and by :func:`send_inject` alike."""
    check_inject(text)
    message_id = new_event_id()
    event = Event.create(key, InboxQueued(message_id, text, caller), author=author_of(via, caller))
    return message_id, event


@attrs.define(eq=False)
class Inbox:
    """Messages in arrival order; a turn takes a snapshot and removes it only when it succeeds."""

    _pending: list[InboxMessage] = attrs.field(factory=list, init=False)
    #: The ids queued or delivered so far; made by the first message (most runs get none).
    _known: set[str] | None = attrs.field(default=None, init=False)

    def add(self, message: InboxMessage) -> bool:
        """Queue ``message`` unless a message with its id is already queued or was delivered."""
        if self._known is None:
            self._known = set()
        elif message.message_id in self._known:
            return False
        self._known.add(message.message_id)
        self._pending.append(message)
        return True

    def forget(self, message_id: str) -> None:
        """Remember ``message_id`` as already delivered (for a resumed run)."""
        if self._known is None:
            self._known = set()
        self._known.add(message_id)

    def snapshot(self) -> tuple[InboxMessage, ...]:
        """The messages waiting now, oldest first (they stay queued)."""
        return tuple(self._pending)

    def delivered(self, messages: tuple[InboxMessage, ...]) -> None:
        """Drop ``messages``: they reached the model in a turn that finished."""
        gone = {m.message_id for m in messages}
        self._pending = [m for m in self._pending if m.message_id not in gone]

    def __len__(self) -> int:
        return len(self._pending)

    def oldest_seq(self) -> int:
        """The log seq of the oldest waiting message (0: none waits)."""
        return min((m.seq for m in self._pending if m.seq), default=0)


def inbox_block(messages: tuple[InboxMessage, ...], prompt: str) -> str:
    """The turn prompt with an ``[Inbox]`` block of ``messages`` before it."""
    if not messages:
        return prompt
    lines = ["[Inbox]"]
    for m in messages:
        who = f"(from {m.caller.identity}) " if m.caller is not None and m.caller.identity else ""
        lines.append(f"- {who}{m.text}")
    return "\n".join(lines) + "\n\n" + prompt


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@attrs.define(eq=False)
class Wake:
    """The wake signal: set by inject or ``request_wake`` (from any thread), awaited by sleeps."""

    _inbox: Inbox
    _requested: bool = attrs.field(default=False, init=False)
    _event: anyio.Event | None = attrs.field(default=None, init=False)  # made when a sleep waits
    #: The loop and thread it was made on: a request from another thread is handed over.
    _loop: asyncio.AbstractEventLoop | None = attrs.field(factory=_running_loop, init=False)
    _thread: int = attrs.field(factory=threading.get_ident, init=False)

    def request(self) -> None:
        """Ask for a wake; safe from the loop's thread and from any other thread."""
        if self._loop is not None and threading.get_ident() != self._thread:
            # The one hand-off from another thread. The callback only sets an event, which
            # needs no current task (anyio refuses task-starting calls from callbacks).
            self._loop.call_soon_threadsafe(self._set)
        else:
            self._set()

    def _set(self) -> None:
        self._requested = True
        if self._event is not None:
            self._event.set()

    def undelivered(self) -> int:
        """How many inbox messages wait for the model."""
        return len(self._inbox)

    def consume(self) -> bool:
        """Clear a pending wake; True when one was pending."""
        was_set, self._requested = self._requested, False
        if was_set:
            self._event = None
        return was_set

    async def wait(self) -> None:
        """Return once a wake is requested."""
        if self._requested:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

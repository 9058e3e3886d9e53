"""A session's events as Server-Sent Events: read from the log after a seq, as they come.

The stream is the log read in order: ``id:`` is each event's seq, so a client that comes back
with ``Last-Event-ID`` gets exactly what followed it, whatever run or wake wrote it. New events
are found when the store's watch signals one (PostgreSQL's LISTEN), when this server appended
one itself, or at the next poll (a store that does not notify); a comment every ``heartbeat``
seconds keeps proxies from closing an idle stream.

Nothing is buffered for a client: the next batch is read only once the previous one was sent,
and a send that does not finish within ``send_timeout`` drops the client. A slow reader holds
neither the store (each read is one short query) nor a run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from datetime import timedelta

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from eventlog import EventLog, SessionKey
from scheduler import Clock

from ._views import event_dict

#: How many events one read of the stream takes from the log.
BATCH = 200


class Changes:
    """What this server appended: streams wait on it beside the store's watch, so an inject
    through the API reaches its session's streams without waiting for a poll."""

    def __init__(self) -> None:
        self._changed = anyio.Event()

    def notify(self) -> None:
        """Wake every waiter (then wait on a fresh event)."""
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def wait(self) -> None:
        """Return at the next :meth:`notify`."""
        await self._changed.wait()


def frame(event_id: int, kind: str, data: object) -> bytes:
    """One SSE message: ``id:``, ``event:`` and the JSON ``data:`` (one line: JSON escapes
    newlines inside strings)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event_id}\nevent: {kind}\ndata: {text}\n\n".encode()


async def _first(*waits: Callable[[], Awaitable[None]]) -> None:
    """Return when the first of ``waits`` returns (the others are cancelled)."""
    async with anyio.create_task_group() as tg:

        async def one(wait: Callable[[], Awaitable[None]]) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(one, wait)


async def session_frames(
    log: EventLog,
    key: SessionKey,
    after: int,
    *,
    content: bool,
    changes: Changes,
    clock: Clock,
    heartbeat: float,
    poll: float,
) -> AsyncGenerator[bytes]:
    """The SSE messages of ``key``'s events after seq ``after``, then of each new one, with a
    heartbeat comment whenever ``heartbeat`` seconds of ``clock`` pass without one; never ends
    (the client leaves)."""
    beat = timedelta(seconds=heartbeat)
    next_beat = clock.now() + beat

    async def until_beat() -> None:
        await clock.sleep_until(next_beat)

    async with log.watch(key) as watch:
        while True:
            batch = await log.read(key, after_seq=after, limit=BATCH)
            for event in batch:
                yield frame(event.seq, str(event.kind), event_dict(event, content=content))
                after = event.seq
            if len(batch) == BATCH:
                continue  # more waiting: no pause between batches
            with anyio.move_on_after(poll):
                await _first(watch.wait, changes.wait, until_beat)
            if clock.now() >= next_beat:
                yield b": heartbeat\n\n"
                next_beat = clock.now() + beat


class EventStream(StreamingResponse):
    """A ``text/event-stream`` response that ends when its client leaves, and drops a client
    that does not take a message within ``send_timeout`` seconds of ``clock``."""

    def __init__(self, frames: AsyncGenerator[bytes], *, send_timeout: float, clock: Clock) -> None:
        super().__init__(
            frames,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._frames = frames
        self.send_timeout = send_timeout
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async with anyio.create_task_group() as tg:

            async def gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(gone)
            async with aclosing(self._frames) as frames:
                async for chunk in frames:
                    with self.clock.move_on_after(self.send_timeout) as sending:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if sending.cancelled_caught:
                        break  # a client that does not read is let go
            tg.cancel_scope.cancel()

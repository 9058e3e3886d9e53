"""PostgresEventLog's notifications: one LISTEN connection per log, and the watches it wakes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import psycopg

from . import _postgres_conn as pgconn
from . import _postgres_sql as sql
from ._events import SessionKey

#: Seconds a listening connection waits for a notification before it probes its server: a
#: link that died without a word (a host gone, a cable cut) is found within about this long.
PROBE_EVERY = 30.0

#: Seconds between attempts to reopen a listening connection that dropped: the first, and
#: the most (each failure doubles the wait).
RECONNECT_FIRST, RECONNECT_MOST = 0.05, 5.0


class Watch:
    """Wake-ups for one session (``key``), or for every session's due-ness (``key`` None).

    Made by :meth:`PostgresEventLog.watch <eventlog.PostgresEventLog.watch>`. A notification
    is a hint only: whoever waits re-reads the log from its last seq.
    """

    def __init__(self, key: SessionKey | None) -> None:
        self.key = key
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        return f"Watch({self.key!r})"

    async def wait(self) -> None:
        """Return when something changed for the watched session (key) — or, with key None,
        for any session's due-ness (a checkpoint, a lease release, a control request) — since
        the watch began or since the last wait returned. Coalesced: many notifications, one
        wake. A listener connection that drops is reopened; while it is down, wait() returns
        spuriously once per reconnect (callers re-read anyway)."""
        await self._changed.wait()
        self._changed.clear()

    @property
    def woken(self) -> bool:
        """Whether something changed that no :meth:`wait` has returned for yet (a wait now
        would return at once)."""
        return self._changed.is_set()

    def wake(self) -> None:
        """Make the next (or the pending) :meth:`wait` return."""
        self._changed.set()


class Listener:
    """The LISTEN connection of one log (never a pooled one: a pool hands connections out
    to one operation at a time), and the watches its notifications wake.

    The connection opens with the first watch and stays until :meth:`aclose`; one that drops
    is reopened (every watch woken, as what happened meanwhile is not known).
    """

    def __init__(self, dsn: str, channel: str, masked: str, timeout: float) -> None:
        self._dsn, self._channel, self._masked = dsn, channel, masked
        self._connect_timeout = max(1, round(timeout))
        self._watches: set[Watch] = set()
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()  # set once LISTEN ran, or the first connect failed
        self._failure: BaseException | None = None
        #: How many times a connection began listening (more than once: it reconnected).
        self.connections = 0

    @contextlib.contextmanager
    def watch(self, key: SessionKey | None) -> Iterator[Watch]:
        """A watch registered for as long as the block runs (the connection started if need be)."""
        watch = Watch(key)
        self._watches.add(watch)
        if self._task is None or self._task.done():
            self._failure = None
            self._listening.clear()
            self._task = asyncio.create_task(self._run(), name=f"LISTEN {self._channel}")
        try:
            yield watch
        finally:
            self._watches.discard(watch)

    async def started(self) -> None:
        """Return once the connection listens; :class:`StoreUnavailable` if it cannot connect."""
        await self._listening.wait()
        if self._failure is not None:
            raise pgconn.unavailable(self._masked, "listen for changes", self._failure)

    async def aclose(self) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        """Listen, dispatch, and reconnect after a drop, until cancelled."""
        delay = RECONNECT_FIRST
        listened = False
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, connect_timeout=self._connect_timeout
                )
                async with conn:
                    await conn.execute(sql.listen(self._channel))
                    if listened:  # a reconnect: what changed while it was down is not known
                        self._wake_all()
                    listened = True
                    self.connections += 1
                    self._listening.set()
                    delay = RECONNECT_FIRST
                    await self._dispatch(conn)
            except psycopg.Error as exc:
                if not listened:  # the first connection: the watch that asked learns why
                    self._failure = exc
                    self._listening.set()
                    return
                self._wake_all()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MOST)

    async def _dispatch(self, conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        """Wake the watches each notification is for, probing the server when it is quiet."""
        while True:
            async for notification in conn.notifies(timeout=PROBE_EVERY):
                key = sql.key_of_notice(notification.payload)
                for watch in list(self._watches):
                    if watch.key is None or key is None or watch.key == key:
                        watch.wake()
            await conn.execute(sql.PROBE)

    def _wake_all(self) -> None:
        for watch in list(self._watches):
            watch.wake()

"""PostgresEventLog's notifications: one LISTEN connection per log, and the watches it wakes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import anyio
import psycopg

from .._errors import StoreUnavailable
from .._events import SessionKey
from . import _conn as pgconn
from . import _sql as sql

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

    def __init__(self, key: SessionKey | None, listener: Listener) -> None:
        self.key = key
        #: The notice of the watched session's changes (None: every session's).
        self.notice = None if key is None else sql.notice(key)
        self._listener = listener
        self._changed = False
        self._signal = asyncio.Event()  # set by a change, or to hand the reading over

    def __repr__(self) -> str:
        return f"Watch({self.key!r})"

    async def wait(self) -> None:
        """Return when something changed for the watched session (key) — or, with key None,
        for any session's due-ness (a checkpoint, a lease release, a control request) — since
        the watch began or since the last wait returned. Coalesced: many notifications, one
        wake. A listener connection that drops is reopened; while it is down, wait() returns
        spuriously once per reconnect (callers re-read anyway)."""
        await self._listener.wait(self)
        self._changed = False

    @property
    def woken(self) -> bool:
        """Whether a change was seen that no :meth:`wait` has returned for yet (notifications
        are read while some watch of the log waits)."""
        return self._changed

    def wake(self) -> None:
        """Make the next (or the pending) :meth:`wait` return."""
        self._changed = True
        self._signal.set()


class Listener:
    """The LISTEN connection of one log (never a pooled one: a pool hands connections out to
    one operation at a time), and the watches its notifications wake.

    No task of its own reads the connection: a waiting watch does, for every watch, until
    its own change comes; then it hands the reading over to another waiting watch. While
    nobody waits, notifications wait on the connection. One that drops is reopened by the
    next reader (every watch woken, as what happened meanwhile is not known).
    """

    def __init__(self, dsn: str, channel: str, masked: str, timeout: float) -> None:
        self._dsn, self._channel, self._masked = dsn, channel, masked
        self._connect_timeout = max(1, round(timeout))
        self._watches: set[Watch] = set()
        self._waiting: set[Watch] = set()  # watches waiting while another reads
        self._reader: Watch | None = None
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._lock = anyio.Lock()  # opening the connection
        self._closed = False
        #: How many times a connection began listening (more than once: it reconnected).
        self.connections = 0

    @contextlib.contextmanager
    def watch(self, key: SessionKey | None) -> Iterator[Watch]:
        """A watch registered for as long as the block runs."""
        watch = Watch(key, self)
        self._watches.add(watch)
        try:
            yield watch
        finally:
            self._watches.discard(watch)

    async def start(self) -> None:
        """Listen now if the connection is not open; :class:`StoreUnavailable` if it cannot."""
        if self._conn is None:
            try:
                await self._open()
            except psycopg.Error as exc:
                raise pgconn.unavailable(self._masked, "listen for changes", exc) from exc

    async def aclose(self) -> None:
        """Close the connection; a watch reading it returns (spuriously)."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        self._wake_all()

    async def wait(self, watch: Watch) -> None:
        """Return once ``watch`` has seen a change, reading the connection meanwhile unless
        another watch already does."""
        while not watch.woken:
            if self._closed:
                raise StoreUnavailable(f"event log {self._masked} is closed")
            if self._reader is None:
                self._reader = watch
                try:
                    await self._read_until(watch)
                finally:
                    self._reader = None
                    for waiting in self._waiting:  # hand the reading over to one of them
                        waiting._signal.set()
                        break
            else:
                self._waiting.add(watch)
                try:
                    await watch._signal.wait()
                finally:
                    self._waiting.discard(watch)
                    watch._signal.clear()

    async def _read_until(self, watch: Watch) -> None:
        """Dispatch notifications to every watch until ``watch`` has one; a dropped connection
        is reopened (waiting longer after each failure), which wakes every watch."""
        delay = RECONNECT_FIRST
        while not watch.woken and not self._closed:
            conn = self._conn
            if conn is None:
                try:
                    await self._open()
                except psycopg.Error:
                    await anyio.sleep(delay)
                    delay = min(delay * 2, RECONNECT_MOST)
                    continue
                self._wake_all()  # a reconnect: what changed while it was down is not known
                return
            try:
                await self._dispatch(conn, watch)
            except psycopg.Error:
                if self._conn is conn:
                    self._conn = None
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
                self._wake_all()

    async def _dispatch(
        self, conn: psycopg.AsyncConnection[tuple[object, ...]], reader: Watch
    ) -> None:
        """Wake the watches each notification is for until ``reader`` is woken; probe the
        server when it is quiet."""
        while True:
            async with contextlib.aclosing(conn.notifies(timeout=PROBE_EVERY)) as notifications:
                async for notification in notifications:
                    payload = notification.payload
                    # A payload this code did not write (an older release's, during an
                    # upgrade) wakes every watch: a wake for nothing, never one lost.
                    known = sql.is_notice(payload)
                    for watch in list(self._watches):
                        if watch.notice is None or not known or watch.notice == payload:
                            watch.wake()
                    if reader.woken:
                        return
            await conn.execute(sql.PROBE)

    async def _open(self) -> None:
        """Open the connection and LISTEN on it (unless another watch just did)."""
        async with self._lock:
            if self._conn is not None:
                return
            if self._closed:
                raise StoreUnavailable(f"event log {self._masked} is closed")
            conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, connect_timeout=self._connect_timeout
            )
            try:
                await conn.execute(sql.listen(self._channel))
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
            self.connections += 1

    def _wake_all(self) -> None:
        for watch in list(self._watches):
            watch.wake()

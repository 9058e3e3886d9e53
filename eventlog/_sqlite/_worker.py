"""aiosqlite's worker thread as SqliteEventLog uses it: one trip per operation, never a hang.

Every operation of the store is one function run with the raw ``sqlite3`` connection on the
connection's thread, in a single queued call (:func:`on_thread`); a write wraps its function in
one transaction (:func:`in_transaction`). The thread is a daemon, so a log nobody closed cannot
keep its process alive, and such a connection is closed at interpreter exit (:func:`connect`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import sqlite3
import threading
import weakref
from collections.abc import Callable
from typing import TypeVar, cast

import aiosqlite
import anyio

T = TypeVar("T")

#: Seconds a connection left open at interpreter exit gets to finish and close.
EXIT_GRACE = 2.0


async def connect(
    path: str, *, uri: bool = False
) -> tuple[aiosqlite.Connection, Callable[[], None]]:
    """An open autocommit connection on a daemon thread, closed at exit if still open then.

    ``path`` is a ``file:`` URI when ``uri`` is true (a read-only open). Returns the connection
    and the function to call once it has been closed (it cancels the close at exit).

    aiosqlite's worker thread is not a daemon and ends only when its connection is closed: a
    program that forgot to close its log would never exit, the interpreter waiting for the
    thread at shutdown. As a daemon it cannot hold the process, and :func:`_close_at_exit`
    still closes the connection at exit, so that what was in flight ends first.
    """
    db = aiosqlite.connect(path, isolation_level=None, uri=uri)
    thread = _thread_of(db)
    thread.daemon = True  # before it starts, on the await below
    try:
        await db
    except BaseException:
        # aiosqlite stops the thread of a failed connect without waiting for it; its last call
        # back to this loop could come after the loop closed, an exception in that thread
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(thread.join, EXIT_GRACE)
        raise
    hook = functools.partial(_close_at_exit, weakref.ref(db))
    atexit.register(hook)
    return db, functools.partial(atexit.unregister, hook)


def _close_at_exit(ref: weakref.ref[aiosqlite.Connection]) -> None:
    """At interpreter exit: close a connection its log left open, waiting a little for it.

    The operation in flight (if any) ends, the connection closes (checkpointing the WAL), and
    the thread stops. One that takes longer than :data:`EXIT_GRACE` is cut off with the
    daemon thread: SQLite rolls an unfinished transaction back on the next open.
    """
    db = ref()
    if db is None:  # collected: aiosqlite stopped its thread then
        return
    stop = getattr(db, "stop", None)  # aiosqlite >= 0.22
    thread = _thread_of(db)
    if stop is not None and thread.is_alive():
        stop()
        thread.join(EXIT_GRACE)


def _thread_of(db: aiosqlite.Connection) -> threading.Thread:
    """The worker thread of ``db`` (before aiosqlite 0.22 the connection was itself the thread)."""
    thread: threading.Thread | None = getattr(db, "_thread", None)
    return thread if thread is not None else cast(threading.Thread, db)


async def on_thread(db: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``work`` with the raw connection on aiosqlite's thread, in one queued call.

    aiosqlite has no public way to run several statements in one trip to its thread, and each
    trip is a thread handoff that costs more than the SQL (three trips for a batch with a
    checkpoint: about three times the cost). This is the one place that uses aiosqlite
    internals: ``Connection._execute`` and ``Connection._conn``, as aiosqlite's own ``Cursor``
    does. Cancelling the caller does not stop ``work``: the transaction still ends, whole.
    """
    result: T = await db._execute(lambda: work(db._conn))  # type: ignore[no-untyped-call]
    return result


class StuckTransaction(Exception):
    """A transaction failed and so did its rollback: the connection is still inside it and
    must be closed. The failure itself is the ``__cause__``."""


def transaction(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """``work(conn)`` in ``BEGIN IMMEDIATE ... COMMIT``, rolled back if it raises.

    Whether the rollback left the connection clean is told here, on the connection's thread,
    in the same trip (:class:`StuckTransaction`): looked at later from the event loop, the
    connection may already be inside the next queued transaction.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn)
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if conn.in_transaction and isinstance(exc, Exception):
            raise StuckTransaction("the transaction's rollback failed") from exc
        raise
    return result


def in_transaction(work: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
    """``work`` made to run as one transaction (see :func:`transaction`)."""
    return functools.partial(transaction, work=work)


async def close_quietly(db: aiosqlite.Connection, forget_exit: Callable[[], None] | None) -> None:
    """Close a connection that failed, whatever else goes wrong (shielded: it is bounded), then
    cancel its close at exit (``forget_exit``, from :func:`connect`)."""
    with anyio.CancelScope(shield=True), contextlib.suppress(sqlite3.Error):
        await db.close()
    if forget_exit is not None:
        forget_exit()

"""The durable stores the lease, resume, remote-control and crash tests run on, opened from text.

One text names a store everywhere, in the test and in the child processes it starts: a file
path is a SQLite log, a ``postgresql://`` (or ``postgres://``) URL a PostgreSQL one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from eventlog import Now, PostgresEventLog, SqliteEventLog, utcnow

#: What the tests open: either store, with the methods both have beyond the protocol.
DurableLog = SqliteEventLog | PostgresEventLog

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")

#: Each store's tables, for the statements tests run around the library (same columns used:
#: events seq, id, kind, payload; the lease row's expires_at).
_TABLES = {
    "sqlite": {"events": "events", "sessions": "leases"},
    "postgres": {"events": "eventlog_events", "sessions": "eventlog_sessions"},
}


def is_postgres(target: str) -> bool:
    """Whether ``target`` is a PostgreSQL URL (anything else is a SQLite file's path)."""
    return target.startswith(_POSTGRES_SCHEMES)


def open_store(target: str, *, clock: Now = utcnow) -> DurableLog:
    """The (unopened) log ``target`` names: PostgresEventLog for a URL, SqliteEventLog else."""
    if is_postgres(target):
        return PostgresEventLog(target, clock=clock)
    return SqliteEventLog(Path(target), clock=clock)


@attrs.frozen
class DurableStore:
    """One store of a test: its kind (``sqlite`` or ``postgres``) and the text that opens it.

    ``open()`` gives a new log on the same store each time: a second one stands for another
    process writing to the log the run uses.
    """

    kind: str
    target: str

    def open(self, *, clock: Now = utcnow) -> DurableLog:
        """A new (unopened) log on this store; use it with ``async with``."""
        return open_store(self.target, clock=clock)

    def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """Run one statement straight on the store, around the library (to damage a row the
        way another writer could), committed; returns the rows it gave.

        ``{events}`` and ``{sessions}`` in ``sql`` name the store's tables of events and of
        lease rows; values go in ``params`` at ``?`` (``%s`` on PostgreSQL)."""
        sql = sql.format(**_TABLES[self.kind])
        if self.kind == "sqlite":
            import sqlite3

            with sqlite3.connect(self.target) as conn:
                return [tuple(row) for row in conn.execute(sql, tuple(params)).fetchall()]
        import psycopg

        with psycopg.connect(self.target, autocommit=True) as pg:
            cursor = pg.execute(sql.replace("?", "%s"), tuple(params))
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []

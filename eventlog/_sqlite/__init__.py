"""The SQLite store: SqliteEventLog and what it runs on its connection's thread.

_log.py      SqliteEventLog: aiosqlite, WAL, one transaction per write, lease rows; its
             errors (a file it cannot use, an sqlite error turned into ours)
_tx.py       what runs inside those transactions: inserts, the lease fence, claims,
             batched renewals, tokens added and revoked, migration, a connection's set-up
_prune.py    SqliteEventLog.prune's statements: candidates, a batch per transaction
_schema.py   its tables (the API's tokens too), statements and row conversions
_worker.py   aiosqlite's thread: one trip per operation, a daemon closed at exit
"""

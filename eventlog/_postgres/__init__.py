"""The PostgreSQL store: PostgresEventLog, imported on first use (it needs psycopg).

_log.py      PostgresEventLog: psycopg 3 async, a pool, one statement per write, claims
_sql.py      its SQL but prune's: schema, statements, migrations; how it stores text
             (U+0000 escaped, keys as parameters, notification payloads: a digest of the
             key); its rows read back (events, summaries, leases, claims, tokens)
_batch.py    a batch of events as its append statement's parameters (plain or JSON)
_conn.py     its pool and connections: the masked DSN, server errors, schema set-up
_prune.py    PostgresEventLog.prune's SQL and statements: candidates, a batch per statement
_listen.py   its LISTEN connection and Watch (wake-ups across processes)
"""

"""Durability: the session's lease and log watch, and rebuilding a run from its log.

_durable.py       the session lease (or one lent: AdoptedLease), its heartbeat, the log watch
_restore.py       rebuilding a run from its session's log: bounded reads, then the fold
"""

"""Callers and originators: the permission gate's Caller and the copy the event log keeps."""

from __future__ import annotations

from eventlog import Originator
from permissions import Caller


def to_originator(caller: Caller | None) -> Originator | None:
    """The event log's copy of ``caller`` (by value)."""
    if caller is None:
        return None
    return Originator(identity=caller.identity, labels=dict(caller.labels), admin=caller.admin)


def to_caller(origin: Originator | None) -> Caller | None:
    """The gate's Caller for a logged originator."""
    if origin is None:
        return None
    return Caller(identity=origin.identity, labels=dict(origin.labels), admin=origin.admin)

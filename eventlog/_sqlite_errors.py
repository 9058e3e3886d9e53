"""SqliteEventLog's error messages: a file it cannot use, an sqlite error turned into ours."""

from __future__ import annotations

import os
import sqlite3

from . import _schema as sql
from ._errors import StoreUnavailable

#: SQLite's primary result codes that say a file cannot be written (or opened for writing).
READ_ONLY_CODES = frozenset({sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN})
#: Those that say another connection held the file: the same call may succeed later.
BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def code(exc: sqlite3.Error) -> int:
    """The primary SQLite result code of ``exc`` (its extended code's low byte); -1 if none."""
    found = getattr(exc, "sqlite_errorcode", None)
    return -1 if found is None else found & 0xFF


def version_problem(path: str, found: str, *, read_only: bool) -> str:
    """Why the file ``path``, of store version ``found``, cannot be used."""
    if found == "none" and read_only:
        return f"event log {path} has no event log tables (opened read-only: not made)"
    problem = (
        f"event log {path} has store schema version {found}, this code reads"
        f" version {sql.STORE_VERSION}"
    )
    if found.isdigit() and int(found) > sql.STORE_VERSION:
        return problem + "; upgrade the library"
    if found in sql.MIGRATIONS and read_only:
        return problem + f" and migrates version {found}, but the file is read-only"
    return problem


def unavailable(path: str, what: str, exc: sqlite3.Error) -> StoreUnavailable:
    """The error for an sqlite error ``exc`` met while doing ``what`` with the file ``path``."""
    if code(exc) == sqlite3.SQLITE_READONLY:
        return StoreUnavailable(f"event log {path} is read-only: cannot {what} ({exc})")
    directory = os.path.dirname(os.path.abspath(path))
    if code(exc) == sqlite3.SQLITE_CANTOPEN and not os.access(directory, os.W_OK):
        # SQLite says "unable to open database file" where nothing can be written.
        return StoreUnavailable(
            f"event log {path}: cannot {what}: directory {directory} is read-only ({exc})"
        )
    busy = code(exc) in BUSY_CODES  # another writer held the file past busy_timeout
    return StoreUnavailable(f"event log {path}: cannot {what}: {exc}", transient=busy)

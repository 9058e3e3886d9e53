"""SqliteEventLog: the file, its transactions, and what it does when the file misbehaves."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from eventlog import (
    AssistantMessage,
    Checkpoint,
    CorruptEvent,
    Event,
    EventKind,
    Lease,
    LeaseHolder,
    LeaseLost,
    Note,
    SessionKey,
    SessionLocked,
    SqliteEventLog,
    StoreUnavailable,
    UnknownSchemaVersion,
    UserMessage,
)
from eventlog._sqlite._schema import (
    INSERT_EVENT,
    SELECT_CHECKPOINT,
    SELECT_DUE,
    SELECT_EVENTS,
    SELECT_LAST,
    SELECT_LEASE,
    SELECT_SESSIONS,
    SELECT_SID,
    STORE_VERSION,
    checkpoint_params,
    event_row,
    session_params,
)
from tests.eventlog.helpers import add

pytestmark = pytest.mark.anyio

A = SessionKey("app", "ops", "a")


def batch(key: SessionKey = A, turn: int = 1) -> list[Event]:
    return [
        Event.create(key, UserMessage("hello", turn)),
        Event.create(key, AssistantMessage("hi", turn)),
        Event.create(key, Checkpoint(turn, 10, 5, 0.25, "continue")),
    ]


def wal_commits(db_path: Path) -> int:
    """How many commit frames the current generation of the WAL file holds."""
    wal = Path(f"{db_path}-wal")
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < 32:
        return 0
    page_size, salts = struct.unpack(">I", data[8:12])[0], data[16:24]
    commits, offset = 0, 32
    while offset + 24 + page_size <= len(data):
        header = data[offset : offset + 24]
        if header[8:16] != salts:
            break
        commits += struct.unpack(">I", header[4:8])[0] != 0
        offset += 24 + page_size
    return commits


def run_sql(db_path: Path, statement: str, params: tuple[object, ...] = ()) -> None:
    """Run one statement from a separate, plain sqlite3 connection (another process's view)."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute(statement, params)


def insert_row(db_path: Path, kind: str, payload: str, *, v: int = 1, at: str = "") -> int:
    """Insert one raw event row of session ``A`` (as the store would) and return its seq."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        key = (A.app, A.user, A.session_id)
        conn.execute("INSERT OR IGNORE INTO sessions (app, user, session_id) VALUES (?, ?, ?)", key)
        (sid,) = conn.execute(
            "SELECT sid FROM sessions WHERE app = ? AND user = ? AND session_id = ?", key
        ).fetchone()
        cursor = conn.execute(
            "INSERT INTO events (sid, id, kind, author, at, v, payload)"
            " VALUES (?, 'bad-id', ?, '', ?, ?, ?)",
            (sid, kind, at or "2030-01-01T00:00:00+00:00", v, payload),
        )
        seq = cursor.lastrowid or 0
        if kind == "checkpoint":
            conn.execute("UPDATE sessions SET checkpoint_seq = ? WHERE sid = ?", (seq, sid))
        return seq


def query_plan(db_path: Path, query: str, params: tuple[object, ...]) -> str:
    """SQLite's plan for ``query``, its steps joined in one line."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        return " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params))


class CancellingClock:
    """A clock that cancels ``scope`` (when one is set) each time it is read."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self.scope: anyio.CancelScope | None = None

    def __call__(self) -> datetime:
        if self.scope is not None:
            self.scope.cancel()
        return self.clock()


@contextlib.contextmanager
def holding_the_write_lock(path: Path) -> Iterator[Callable[[], None]]:
    """A new file (not in WAL mode) whose write lock another connection holds until the
    function given is called, or the block ends."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    once = threading.Lock()
    open_ = [True]

    def release() -> None:
        with once:
            if open_[0]:
                conn.execute("COMMIT")
                conn.close()
                open_[0] = False

    try:
        yield release
    finally:
        release()


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` unwritable for the duration (chattr +i when running as root)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], check=False).returncode:
        pytest.skip("cannot make a file read-only for root here")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


class TestFile:
    """The database file: WAL mode, reopening, other connections."""

    async def test_wal_mode(self, db_path: Path) -> None:
        """The file is in WAL mode once the log opened it."""
        async with SqliteEventLog(db_path):
            pass
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert ("wal",) == conn.execute("PRAGMA journal_mode").fetchone()

    async def test_a_new_file_another_process_is_writing_waits_for_it(self, db_path: Path) -> None:
        """A file another process holds the write lock on is opened once the lock is let go.

        Going into WAL mode needs the file to itself, and SQLite answers "database is locked"
        at once, without waiting ``busy_timeout``, when another connection holds the write lock
        (as when several processes start on a new file together): the log waits for it.
        """
        with holding_the_write_lock(db_path) as release:
            threading.Timer(0.2, release).start()
            async with SqliteEventLog(db_path, busy_timeout=30) as log:
                assert 3 == len(await log.append(batch()))
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert ("wal",) == conn.execute("PRAGMA journal_mode").fetchone()

    async def test_a_write_lock_held_past_busy_timeout_is_reported(self, db_path: Path) -> None:
        """A lock still held after ``busy_timeout`` is a StoreUnavailable saying so; the file
        opens once the lock is let go."""
        with (
            holding_the_write_lock(db_path),
            pytest.raises(StoreUnavailable, match="locked") as caught,
        ):
            await SqliteEventLog(db_path, busy_timeout=0.1).open()
        assert str(db_path) in str(caught.value)
        assert caught.value.transient  # another writer's: it may well open later
        async with SqliteEventLog(db_path) as log:
            assert 3 == len(await log.append(batch()))

    async def test_reopened_file_keeps_everything(self, db_path: Path, clock) -> None:
        """Events, checkpoints, summaries and leases survive closing and reopening."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            stored = await add(log, batch())
            owner = LeaseHolder("elsewhere", 1, "owner")
            await log.acquire_lease(A, owner, ttl=60)
            summaries = await log.sessions()
        async with SqliteEventLog(db_path, clock=clock) as log:
            assert stored == await log.read(A)
            assert stored[-1] == await log.latest_checkpoint(A)
            assert summaries == await log.sessions()
            with pytest.raises(SessionLocked):
                await log.acquire_lease(A, LeaseHolder("here", 2, "me"), ttl=60)

    async def test_another_connection_writes_alongside(self, db_path: Path) -> None:
        """Two logs on one file (a CLI beside a daemon) both append; seqs stay unique."""
        async with SqliteEventLog(db_path) as daemon, SqliteEventLog(db_path) as cli:
            first = await add(daemon, batch())
            injected = await add(cli, [Event.create(A, UserMessage("from the CLI", 1))])
            last = await add(daemon, batch(turn=2))
            assert first + injected + last == await daemon.read(A)

    async def test_session_another_connection_added_is_shared(self, db_path: Path) -> None:
        """A session a second log added first is found by the first log, not added twice."""
        other = SessionKey("app", "ops", "new")
        async with SqliteEventLog(db_path) as daemon, SqliteEventLog(db_path) as cli:
            await daemon.append(batch())  # the daemon knows session A, not the other one
            injected = await add(cli, [Event.create(other, UserMessage("first", 1))])
            answered = await add(daemon, batch(other))
            assert injected + answered == await daemon.read(other)
            assert answered[-1] == await cli.latest_checkpoint(other)
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert [(1,)] == conn.execute(
                "SELECT count(*) FROM sessions WHERE session_id = 'new'"
            ).fetchall()

    async def test_opens_lazily(self, db_path: Path) -> None:
        """Nothing touches the disk before the first call."""
        log = SqliteEventLog(db_path)
        assert not await anyio.Path(db_path).exists()
        await log.append(batch())
        await log.aclose()
        assert await anyio.Path(db_path).exists()

    async def test_full_synchronous_is_accepted(self, db_path: Path) -> None:
        """synchronous='FULL' opens and appends like the default."""
        async with SqliteEventLog(db_path, synchronous="full") as log:
            assert 3 == len(await log.append(batch()))

    def test_unknown_synchronous_is_refused(self, db_path: Path) -> None:
        """Only NORMAL and FULL are accepted."""
        with pytest.raises(ValueError, match="synchronous"):
            SqliteEventLog(db_path, synchronous="OFF")

    @pytest.mark.parametrize(
        ("query", "params", "expected"),
        [
            (
                SELECT_EVENTS + " ORDER BY seq LIMIT ?",
                ("a", "u", "s", 0, 10),
                [
                    "USING COVERING INDEX sqlite_autoindex_sessions_1",
                    "USING INDEX events_by_session",
                ],
            ),
            (
                SELECT_LAST.format("?") + " ORDER BY seq DESC LIMIT ?",
                ("a", "u", "s", "note", 10),
                [
                    "USING COVERING INDEX sqlite_autoindex_sessions_1",
                    "USING INDEX events_by_session",
                ],
            ),
            (
                SELECT_CHECKPOINT,
                ("a", "u", "s"),
                [
                    "SEARCH s USING INDEX sqlite_autoindex_sessions_1",
                    "SEARCH e USING INTEGER PRIMARY KEY",
                ],
            ),
            (SELECT_DUE, ("now", "now"), ["USING INDEX sessions_by_wake"]),
            (SELECT_SID, ("a", "u", "s"), ["USING COVERING INDEX sqlite_autoindex_sessions_1"]),
            (SELECT_LEASE, ("a", "u", "s"), ["USING INDEX sqlite_autoindex_leases_1"]),
        ],
        ids=["read", "read_last", "latest_checkpoint", "due_sessions", "session_id", "lease"],
    )
    async def test_reads_use_indexes(
        self, db_path: Path, query: str, params: tuple[object, ...], expected: list[str]
    ) -> None:
        """Reads of one session, its latest checkpoint and the due sessions are index searches."""
        async with SqliteEventLog(db_path):
            pass
        plan = query_plan(db_path, query, params)
        assert [] == [step for step in expected if step not in plan], plan
        assert "SCAN" not in plan, plan

    async def test_sessions_scans_sessions_only(self, db_path: Path) -> None:
        """Listing the sessions scans the sessions table; it looks events up by index only
        (the newest of a session without a checkpoint), never scans them."""
        async with SqliteEventLog(db_path):
            pass
        plan = query_plan(db_path, SELECT_SESSIONS, ("now",))
        scans = [step for step in plan.split(" | ") if step.startswith("SCAN")]
        assert ["SCAN s"] == scans, plan
        assert "SEARCH last USING INTEGER PRIMARY KEY" in plan, plan

    async def test_events_are_keyed_by_a_session_id(self, db_path: Path) -> None:
        """Each event row names its session by one integer id, the same for all its events."""
        other = SessionKey("app", "ops", "b")
        async with SqliteEventLog(db_path) as log:
            await log.append([*batch(), *batch(other)])
            await log.append(batch())
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            rows = conn.execute(
                "SELECT s.session_id, count(*), typeof(e.sid) FROM events AS e"
                " JOIN sessions AS s USING (sid) GROUP BY e.sid ORDER BY s.session_id"
            ).fetchall()
        assert [("a", 6, "integer"), ("b", 3, "integer")] == rows


#: A program that appends through a log it keeps in a global and never closes.
FORGETFUL_PROGRAM = """
import asyncio, sys
from eventlog import Event, Note, SessionKey, SqliteEventLog

log = SqliteEventLog(sys.argv[1])

async def main():
    await log.append([Event.create(SessionKey("app", "ops", "a"), Note("left open"))])

asyncio.run(main())
"""


class TestProcessExit:
    """A log left open neither keeps its process alive nor loses what it wrote."""

    def test_program_that_never_closes_its_log_exits(self, db_path: Path) -> None:
        """The program exits at once, quietly, its events stored and the file closed cleanly."""
        done = subprocess.run(
            [sys.executable, "-W", "always", "-c", FORGETFUL_PROGRAM, str(db_path)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert (0, "") == (done.returncode, done.stderr)
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert [("note",)] == conn.execute("SELECT kind FROM events").fetchall()
        assert not Path(f"{db_path}-wal").exists()  # closed at exit: the WAL was checkpointed


class TestTransactions:
    """Every append is one transaction: one commit, all or nothing."""

    async def test_one_commit_per_append(self, db_path: Path) -> None:
        """An append, checkpoint and summary included, writes exactly one commit to the WAL."""
        async with SqliteEventLog(db_path) as log:
            await log.append(batch())
            before = wal_commits(db_path)
            await log.append(batch(turn=2))
            after_append = wal_commits(db_path)
            await log.append([Event.create(A, UserMessage("no checkpoint", 3))])
            after_plain = wal_commits(db_path)
        assert (1, 1) == (after_append - before, after_plain - after_append)

    async def test_one_commit_per_fenced_append(self, db_path: Path, clock) -> None:
        """The fence is checked inside the append's own transaction: still one commit each,
        and a lost lease commits nothing."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            stale = await log.acquire_lease(A, LeaseHolder("h", 1, "old"), ttl=30)
            clock.advance(31)
            lease = await log.acquire_lease(A, LeaseHolder("h", 1, "new"), ttl=30)
            counts = [wal_commits(db_path)]
            await log.append(batch(), lease=lease)
            counts.append(wal_commits(db_path))
            with pytest.raises(LeaseLost):
                await log.append(batch(), lease=stale)
            counts.append(wal_commits(db_path))
            await log.append_and_release(batch(turn=2), lease)
            counts.append(wal_commits(db_path))
        assert [1, 0, 1] == [b - a for a, b in itertools.pairwise(counts)]

    async def test_a_failed_write_leaves_the_next_ones_transaction_alone(
        self, db_path: Path, clock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A write that failed cleanly (its transaction rolled back) keeps the connection, even
        when the next queued write is already inside its own transaction on the thread: the
        failed one must not mistake that for its own stuck transaction and close the
        connection under it (seen with two daemons on one file)."""
        from eventlog._sqlite import _tx as _sqlite_tx

        real_insert = _sqlite_tx.insert
        go = threading.Event()
        waited: list[bool] = []

        def held_insert(conn: sqlite3.Connection, **rows: Any) -> Any:
            waited.append(go.wait(5))  # inside the next write's transaction, on the thread
            return real_insert(conn, **rows)

        async with SqliteEventLog(db_path, clock=clock) as log:
            await log.acquire_lease(A, LeaseHolder("h", 1, "first"), ttl=30)
            connection = log._db
            monkeypatch.setattr(_sqlite_tx, "insert", held_insert)

            async def refused() -> None:
                with pytest.raises(SessionLocked):
                    await log.acquire_lease(A, LeaseHolder("h", 2, "second"), ttl=30)
                go.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(refused)
                tg.start_soon(log.append, batch())
            assert (waited, log._db) == ([True], connection)
            assert 1 == len(await log.read(A, kinds=[EventKind.CHECKPOINT]))

    def test_a_failed_rollback_is_told_on_the_thread(self) -> None:
        """A transaction whose rollback fails too says so where it ran (StuckTransaction, the
        failure as its cause), so the log drops that connection and no other."""
        from eventlog._sqlite import _worker

        class Unrollable:
            in_transaction = False

            def execute(self, statement: str) -> None:
                if statement == "ROLLBACK":
                    raise sqlite3.OperationalError("disk I/O error")
                self.in_transaction = statement == "BEGIN IMMEDIATE"

        def fails(conn: Any) -> None:
            raise LeaseLost("s", "taken over")

        with pytest.raises(_worker.StuckTransaction) as caught:
            _worker.transaction(Unrollable(), fails)  # type: ignore[arg-type]
        assert isinstance(caught.value.__cause__, LeaseLost)

    async def test_epochs_go_on_after_reopening(self, db_path: Path, clock) -> None:
        """A released lease's epoch is kept in the file: the next holder, in another log on
        the same file, gets a larger one."""
        async with SqliteEventLog(db_path, clock=clock) as log:
            first = await log.acquire_lease(A, LeaseHolder("h", 1, "a"), ttl=30)
            await log.release_lease(first)
        async with SqliteEventLog(db_path, clock=clock) as log:
            second = await log.acquire_lease(A, LeaseHolder("h", 1, "b"), ttl=30)
        assert first.epoch + 1 == second.epoch

    async def test_reads_commit_nothing(self, db_path: Path) -> None:
        """Reading leaves the WAL as it was."""
        async with SqliteEventLog(db_path) as log:
            await log.append(batch())
            before = wal_commits(db_path)
            await log.read(A)
            await log.sessions()
            assert before == wal_commits(db_path)

    async def test_failed_append_commits_nothing(self, db_path: Path) -> None:
        """A batch that fails half way is rolled back: no commit, no rows, no gap in seq."""
        async with SqliteEventLog(db_path) as log:
            first = await add(log, batch())
            before = wal_commits(db_path)
            broken = Event(key=A, kind=EventKind.CHECKPOINT, payload=Note("not a checkpoint"))
            with pytest.raises(TypeError):
                await log.append([Event.create(A, UserMessage("lost", 2)), broken])
            assert before == wal_commits(db_path)
            later = await add(log, batch(turn=2))
            assert first + later == await log.read(A)
            assert first[-1].seq + 1 == later[0].seq

    async def test_cancelled_write_lands_whole_and_frees_the_file(
        self, db_path: Path, clock
    ) -> None:
        """A write whose caller is cancelled mid-flight still ends its transaction, whole."""
        cancelling = CancellingClock(clock)
        async with SqliteEventLog(db_path, clock=cancelling) as log:
            with anyio.CancelScope() as scope:
                cancelling.scope = scope
                await log.acquire_lease(A, LeaseHolder("h", 1, "t"), ttl=30)
            assert scope.cancelled_caught
            cancelling.scope = None
            await log.read(A)  # queued behind the cancelled write: that one has ended
            with contextlib.closing(sqlite3.connect(db_path, timeout=0)) as other:
                other.execute("BEGIN IMMEDIATE")
                assert [("h", 1, "t")] == other.execute(
                    "SELECT host, pid, token FROM leases"
                ).fetchall()
                other.rollback()
            assert 3 == len(await log.append(batch()))


class TestUnreadableRows:
    """Rows this code cannot read fail fast, naming session, seq and event id."""

    @pytest.mark.parametrize(
        ("kind", "payload"),
        [
            ("user_message", '{"text": "cut off'),
            ("user_message", '{"turn": 1}'),
            ("no_such_kind", "{}"),
        ],
    )
    async def test_corrupt_payload(self, db_path: Path, kind: str, payload: str) -> None:
        """A payload that does not decode raises CorruptEvent."""
        async with SqliteEventLog(db_path) as log:
            await log.append(batch())
            seq = insert_row(db_path, kind, payload)
            with pytest.raises(CorruptEvent) as caught:
                await log.read(A)
        assert (str(A), seq, "bad-id") == (
            caught.value.session,
            caught.value.seq,
            caught.value.event_id,
        )
        assert f"seq={seq}" in str(caught.value)

    @pytest.mark.parametrize(
        "reader",
        [
            lambda log: log.read(A, kinds=[EventKind.USER_MESSAGE]),
            lambda log: log.read(A, kinds=[EventKind.CHECKPOINT], limit=5),
            lambda log: log.read_last(A, [EventKind.USER_MESSAGE], 10),
        ],
        ids=["read-kinds", "read-other-kinds", "read_last"],
    )
    async def test_unknown_kind_is_never_left_out(
        self, db_path: Path, reader: Callable[[SqliteEventLog], Awaitable[object]]
    ) -> None:
        """A row of a kind this code does not know is a CorruptEvent to a filtered read too,
        not a row silently skipped (a resume would lose it without a word)."""
        async with SqliteEventLog(db_path) as log:
            await log.append(batch())
            seq = insert_row(db_path, "from_the_future", "{}")
            await log.append(batch(turn=2))
            with pytest.raises(CorruptEvent, match="unknown event kind") as caught:
                await reader(log)
        assert (str(A), seq, "bad-id") == (
            caught.value.session,
            caught.value.seq,
            caught.value.event_id,
        )

    async def test_newer_event_version_in_a_filtered_read(self, db_path: Path) -> None:
        """A row of a newer event version fails a filtered read as UnknownSchemaVersion."""
        async with SqliteEventLog(db_path) as log:
            seq = insert_row(db_path, "user_message", '{"text":"x","turn":1}', v=2)
            with pytest.raises(UnknownSchemaVersion) as caught:
                await log.read(A, kinds=[EventKind.USER_MESSAGE])
        assert seq == caught.value.seq

    async def test_unreadable_time(self, db_path: Path) -> None:
        """An event time that is not ISO 8601 raises CorruptEvent."""
        async with SqliteEventLog(db_path) as log:
            seq = insert_row(db_path, "user_message", '{"text":"x","turn":1}', at="yesterday")
            with pytest.raises(CorruptEvent) as caught:
                await log.read(A)
        assert (str(A), seq, "bad-id") == (
            caught.value.session,
            caught.value.seq,
            caught.value.event_id,
        )

    async def test_unknown_schema_version(self, db_path: Path) -> None:
        """An event written with another schema version raises UnknownSchemaVersion."""
        async with SqliteEventLog(db_path) as log:
            seq = insert_row(db_path, "checkpoint", '{"turns": 1}', v=99)
            with pytest.raises(UnknownSchemaVersion) as caught:
                await log.latest_checkpoint(A)
        assert (str(A), seq, "bad-id") == (
            caught.value.session,
            caught.value.seq,
            caught.value.event_id,
        )
        assert "99" in str(caught.value)


class TestListedCheckpoints:
    """sessions() with a latest checkpoint row it cannot read back."""

    @pytest.mark.parametrize(
        "tampering",
        ["payload = '{not json'", "v = 99", """payload = '{"turns": "many"}'"""],
        ids=["not-json", "newer-schema", "wrong-type"],
    )
    async def test_an_unreadable_checkpoint_leaves_the_listing_whole(
        self, db_path: Path, tampering: str
    ) -> None:
        """That session is listed as its summary row says, without its checkpoint; every
        other session with its own. Reading the checkpoint itself still fails loudly."""
        other = SessionKey("app", "ops", "b")
        async with SqliteEventLog(db_path) as log:
            await log.append([*batch(), *batch(other)])
            before = await log.sessions()
            run_sql(
                db_path,
                f"UPDATE events SET {tampering}"
                " WHERE seq = (SELECT checkpoint_seq FROM sessions WHERE session_id = 'a')",
            )
            listed = await log.sessions()
            with pytest.raises(CorruptEvent):
                await log.latest_checkpoint(A)
        assert [attrs.evolve(s, checkpoint=None) if s.key == A else s for s in before] == listed
        assert None not in [s.checkpoint for s in before]


class TestUnavailable:
    """A file that cannot be opened or written raises StoreUnavailable naming it."""

    async def test_missing_directory(self, tmp_path: Path) -> None:
        """A database in a directory that does not exist cannot be opened."""
        path = tmp_path / "no" / "such" / "dir" / "events.db"
        with pytest.raises(StoreUnavailable, match=str(path)):
            await SqliteEventLog(path).append(batch())

    async def test_missing_file_without_create(self, db_path: Path) -> None:
        """create=False refuses to create a missing file."""
        with pytest.raises(StoreUnavailable, match=str(db_path)):
            await SqliteEventLog(db_path, create=False).open()
        assert not await anyio.Path(db_path).exists()

    async def test_existing_file_without_create(self, db_path: Path) -> None:
        """create=False opens a file that exists."""
        async with SqliteEventLog(db_path) as log:
            stored = await add(log, batch())
        async with SqliteEventLog(db_path, create=False) as log:
            assert stored == await log.read(A)

    async def test_newer_store_schema_is_refused(self, db_path: Path) -> None:
        """A file written by a newer version of the store is not opened, let alone changed."""
        async with SqliteEventLog(db_path):
            pass
        newer = STORE_VERSION + 1
        run_sql(db_path, f"UPDATE meta SET value = '{newer}' WHERE key = 'schema_version'")
        with pytest.raises(StoreUnavailable, match=f"schema version {newer}") as caught:
            await SqliteEventLog(db_path).open()
        assert str(db_path) in str(caught.value)
        assert "upgrade" in str(caught.value)

    async def test_older_store_schema_is_refused(self, db_path: Path) -> None:
        """A file of an older store schema (version 1 keyed events by text) is not opened."""
        async with SqliteEventLog(db_path):
            pass
        run_sql(db_path, "UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        with pytest.raises(StoreUnavailable, match="schema version 1") as caught:
            await SqliteEventLog(db_path).open()
        assert str(db_path) in str(caught.value)

    async def test_not_a_database(self, db_path: Path) -> None:
        """A file that is not SQLite raises StoreUnavailable, not sqlite3's error."""
        await anyio.Path(db_path).write_bytes(b"this is not a database" * 100)
        with pytest.raises(StoreUnavailable, match=str(db_path)):
            await SqliteEventLog(db_path).open()

    async def test_read_only_file(self, db_path: Path) -> None:
        """Appending to a read-only file raises StoreUnavailable naming file and session."""
        async with SqliteEventLog(db_path) as log:
            stored = await add(log, batch())
        with read_only(db_path):
            async with SqliteEventLog(db_path) as log:
                assert stored == await log.read(A)
                with pytest.raises(StoreUnavailable) as caught:
                    await log.append(batch(turn=2))
        assert str(db_path) in str(caught.value)
        assert str(A) in str(caught.value)
        assert "read-only" in str(caught.value)
        assert not caught.value.transient  # someone must make it writable
        async with SqliteEventLog(db_path) as log:
            assert stored == await log.read(A)


#: The tables of store schema version 2, as the previous release of the store created them
#: (kept verbatim, so that the migration is tested against the real old format).
V2_SCHEMA_SCRIPT = """
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    sid INTEGER PRIMARY KEY,
    app TEXT NOT NULL,
    user TEXT NOT NULL,
    session_id TEXT NOT NULL,
    checkpoint_seq INTEGER,
    turns INTEGER,
    cost_usd REAL,
    stop_reason TEXT,
    next_wake_at TEXT,
    updated_at TEXT,
    UNIQUE (app, user, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_wake ON sessions (next_wake_at)
    WHERE stop_reason = 'deferred';
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    sid INTEGER NOT NULL REFERENCES sessions (sid),
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    at TEXT NOT NULL,
    v INTEGER NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (sid, seq);
CREATE TABLE IF NOT EXISTS leases (
    app TEXT NOT NULL,
    user TEXT NOT NULL,
    session_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    token TEXT NOT NULL,
    heartbeat TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (app, user, session_id)
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '2');
COMMIT;
"""

#: Session summaries as version 2 wrote them with each checkpoint.
V2_UPDATE_SUMMARY = """
UPDATE sessions SET
    checkpoint_seq = ?, turns = ?, cost_usd = ?, stop_reason = ?, next_wake_at = ?, updated_at = ?
WHERE sid = ?
"""


def write_v2_file(db_path: Path, events: list[Event], lease: LeaseHolder, until: str) -> None:
    """A version 2 file holding ``events`` (and their summaries) and ``lease``'s lease of A,
    written as version 2 wrote them (the event rows' format did not change)."""
    with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(V2_SCHEMA_SCRIPT)
        for event in events:
            key = session_params(event.key)
            conn.execute(
                "INSERT OR IGNORE INTO sessions (app, user, session_id) VALUES (?, ?, ?)", key
            )
            (sid,) = conn.execute(SELECT_SID, key).fetchone()
            seq = conn.execute(INSERT_EVENT, event_row(sid, event)).lastrowid
            if event.kind == EventKind.CHECKPOINT:
                conn.execute(V2_UPDATE_SUMMARY, (seq, *checkpoint_params(event)[:5], sid))
        conn.execute(
            "INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*session_params(A), lease.host, lease.pid, lease.token, until, until),
        )


class TestMigration:
    """A version 2 file is brought to version 3 in place, in one transaction, losing nothing."""

    async def test_new_file_is_version_6(self, db_path: Path) -> None:
        """A file the store creates says it is version 6."""
        async with SqliteEventLog(db_path):
            pass
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert [("6",)] == conn.execute("SELECT value FROM meta").fetchall()
        assert 6 == STORE_VERSION

    async def test_version_4_file_is_migrated_with_tokens_backfilled(self, db_path: Path) -> None:
        """A version 4 file gets the token columns, filled from each session's latest
        checkpoint (an omitted cached count is 0; an unreadable checkpoint row stays 0)."""
        other, broken = SessionKey("app", "ops", "b"), SessionKey("app", "ops", "c")
        async with SqliteEventLog(db_path) as log:
            await log.append([Event.create(A, Checkpoint(1, 900, 1, 0.0, "go"))])
            await log.append(
                [
                    Event.create(
                        A, Checkpoint(2, 12_400, 1, 0.0, "go", cached_input_tokens=11_904)
                    ),
                    Event.create(other, Checkpoint(1, 700, 1, 0.0, "go")),
                    Event.create(broken, Checkpoint(1, 300, 1, 0.0, "go")),
                ]
            )
        with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
            conn.execute("ALTER TABLE sessions DROP COLUMN input_tokens")
            conn.execute("ALTER TABLE sessions DROP COLUMN cached_input_tokens")
            conn.execute(
                "UPDATE events SET payload = '{not json' WHERE seq ="
                " (SELECT checkpoint_seq FROM sessions WHERE session_id = 'c')"
            )
            conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        async with SqliteEventLog(db_path) as log:
            tokens = {s.key: (s.input_tokens, s.cached_input_tokens) for s in await log.sessions()}
            assert {A: (12_400, 11_904), other: (700, 0), broken: (0, 0)} == tokens
            await log.append(
                [Event.create(other, Checkpoint(2, 1_500, 1, 0.0, "go", cached_input_tokens=800))]
            )
            summaries = {s.key: s for s in await log.sessions()}
            assert (1_500, 800) == (
                summaries[other].input_tokens,
                summaries[other].cached_input_tokens,
            )
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert [("6",)] == conn.execute("SELECT value FROM meta").fetchall()

    async def test_version_3_file_is_migrated_to_4(self, db_path: Path) -> None:
        """A version 3 file gets the unpriced column (its sessions priced, as they were)."""
        async with SqliteEventLog(db_path) as log:
            await log.append(batch())
        with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
            for column in ("unpriced", "input_tokens", "cached_input_tokens"):
                conn.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
            conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
        async with SqliteEventLog(db_path) as log:
            (summary,) = await log.sessions()
            assert (A, False) == (summary.key, summary.unpriced)
            await log.append([Event.create(A, Checkpoint(2, 1, 1, 0.0, "go", unpriced=True))])
            assert [True] == [s.unpriced for s in await log.sessions()]
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert [("6",)] == conn.execute("SELECT value FROM meta").fetchall()

    async def test_version_2_file_is_migrated_keeping_everything(
        self, db_path: Path, clock
    ) -> None:
        """Events, checkpoints, summaries and the live lease of a v2 file survive, in one commit."""
        other = SessionKey("app", "ops", "b")
        events = [*batch(), *batch(other), *batch(turn=2)]
        owner = LeaseHolder("elsewhere", 7, "owner")
        write_v2_file(db_path, events, owner, "2030-01-01T01:00:00.000000+00:00")
        async with SqliteEventLog(db_path, clock=clock) as log:
            assert 1 == wal_commits(db_path)  # the migration, whole
            stored = await log.read(A) + await log.read(other)
            assert events[:3] + events[6:] + events[3:6] == [
                attrs.evolve(event, seq=0) for event in stored
            ]
            assert stored[5] == await log.latest_checkpoint(A)
            summaries = await log.sessions()
            assert [A, other] == [summary.key for summary in summaries]
            assert (2, str(owner), False) == (
                summaries[0].turns,
                summaries[0].holder,
                summaries[0].stopped,
            )
            with pytest.raises(SessionLocked):
                await log.acquire_lease(A, LeaseHolder("here", 2, "me"), ttl=60)
            clock.advance(3600)
            lease = await log.acquire_lease(A, LeaseHolder("here", 2, "me"), ttl=60)
            assert 1 == lease.epoch
            await log.append(batch(turn=3), lease=lease)
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            assert [("6",)] == conn.execute("SELECT value FROM meta").fetchall()

    async def test_migrated_file_opens_again_unchanged(self, db_path: Path) -> None:
        """Opening a migrated file again migrates nothing more."""
        write_v2_file(db_path, batch(), LeaseHolder("h", 1, "t"), "2000-01-01T00:00:00+00:00")
        async with SqliteEventLog(db_path) as log:
            stored = await log.read(A)
        async with SqliteEventLog(db_path) as log:
            assert 0 == wal_commits(db_path)
            assert stored == await log.read(A)


@contextlib.contextmanager
def unwritable(*paths: Path) -> Iterator[None]:
    """Make files and directories unwritable for the duration, even for root.

    Root ignores permission bits, so as root the immutable attribute (chattr +i) is set: the
    kernel then refuses every write, creating files in a directory included, which is what a
    read-only file system does to SQLite (no -wal or -shm file can be made).
    """
    if os.geteuid() != 0:
        modes = [path.stat().st_mode for path in paths]
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            for path, mode in zip(paths, modes, strict=True):
                path.chmod(mode)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", *map(str, paths)], check=False).returncode:
        pytest.skip("cannot make a file read-only for root here (no chattr, or no support)")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", *map(str, paths)], check=True)


async def fill(db_path: Path, clock) -> list[Event]:
    """A closed store holding session A's events, a due checkpoint of B, and a lease of A."""
    due = Event.create(
        SessionKey("app", "ops", "b"),
        Checkpoint(1, 1, 1, 0.0, "later", stop_reason="deferred", next_wake_at=clock.now),
    )
    async with SqliteEventLog(db_path, clock=clock) as log:
        stored = await add(log, batch())
        await log.append([due])
        await log.acquire_lease(A, LeaseHolder("elsewhere", 1, "owner"), ttl=60)
    return stored


async def check_reads_and_refused_writes(log: SqliteEventLog, stored: list[Event], clock) -> None:
    """Every read of ``log`` serves ``stored``; every write raises StoreUnavailable saying
    that the event log is read-only."""
    assert stored == await log.read(A)
    assert stored[-1:] == await log.read_last(A, [EventKind.CHECKPOINT], 1)
    assert stored[-1] == await log.latest_checkpoint(A)
    assert 2 == len(await log.sessions())
    assert ["b"] == [s.key.session_id for s in await log.due_sessions(clock.now)]
    lease = Lease(A, LeaseHolder("elsewhere", 1, "owner"), clock.now, epoch=1)
    writes = [
        log.append(batch(turn=2)),
        log.append(batch(turn=2), lease=lease),
        log.append_and_release(batch(turn=2), lease),
        log.acquire_lease(A, LeaseHolder("here", 2, "me"), ttl=30),
        log.renew_lease(lease, ttl=30),
        log.release_lease(lease),
    ]
    for write in writes:
        with pytest.raises(StoreUnavailable, match="read-only") as caught:
            await write
        assert str(log.path) in str(caught.value)
        assert "unable to open" not in str(caught.value)
    assert log.read_only


class TestReadOnly:
    """A store that cannot be written still serves every read; each write says it is read-only."""

    async def test_read_only_flag(self, db_path: Path, clock) -> None:
        """read_only=True reads a store made by the store and never writes to it."""
        stored = await fill(db_path, clock)
        before = await anyio.Path(db_path).read_bytes()
        async with SqliteEventLog(db_path, clock=clock, read_only=True) as log:
            await check_reads_and_refused_writes(log, stored, clock)
        assert before == await anyio.Path(db_path).read_bytes()

    async def test_read_only_flag_sees_what_a_writer_has_in_its_wal(
        self, db_path: Path, clock
    ) -> None:
        """Beside a live writer, a read-only log reads the WAL too, later commits included."""
        async with SqliteEventLog(db_path, clock=clock) as writer:
            first = await add(writer, batch())
            async with SqliteEventLog(db_path, read_only=True) as reader:
                assert first == await reader.read(A)
                later = await add(writer, batch(turn=2))
                assert first + later == await reader.read(A)

    async def test_read_only_directory_falls_back_by_itself(self, db_path: Path, clock) -> None:
        """A store in a directory nothing can be written to (a read-only file system: no -shm
        file can be made) opens read-only without being asked, and says so on writes."""
        stored = await fill(db_path, clock)
        assert not await anyio.Path(f"{db_path}-shm").exists()  # closed cleanly: SQLite removed it
        with unwritable(db_path.parent, db_path):
            async with SqliteEventLog(db_path, clock=clock) as log:
                await check_reads_and_refused_writes(log, stored, clock)
            async with SqliteEventLog(db_path, clock=clock, read_only=True) as log:
                await check_reads_and_refused_writes(log, stored, clock)

    async def test_new_file_in_a_read_only_directory(self, tmp_path: Path) -> None:
        """Creating a store where nothing can be written says the directory is read-only."""
        directory = tmp_path / "ro"
        directory.mkdir()
        with unwritable(directory), pytest.raises(StoreUnavailable, match="read-only") as caught:
            await SqliteEventLog(directory / "events.db").open()
        assert str(directory) in str(caught.value)

    async def test_a_failed_open_leaves_no_thread_behind(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An open that fails has stopped its connection's thread before it raises: aiosqlite
        stops it without waiting, and a thread that finished after its event loop had closed
        raised in the thread (an unhandled thread exception, reported in a later test). The
        thread is kept busy a moment before its stop here, as a loaded machine may keep it."""
        import aiosqlite

        real_stop = aiosqlite.Connection.stop

        def busy_then_stop(self: aiosqlite.Connection) -> Any:
            self._tx.put_nowait((None, lambda: time.sleep(0.2)))
            return real_stop(self)

        monkeypatch.setattr(aiosqlite.Connection, "stop", busy_then_stop)
        directory = tmp_path / "ro"
        directory.mkdir()
        before = set(threading.enumerate())
        with unwritable(directory), pytest.raises(StoreUnavailable):
            await SqliteEventLog(directory / "events.db").open()
        new = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        assert [] == [t for t in new if "_connection_worker_thread" in t.name]  # aiosqlite's

    async def test_read_only_flag_never_creates_a_file(self, db_path: Path) -> None:
        """A read-only open of a missing file fails clearly and leaves no file behind."""
        with pytest.raises(StoreUnavailable, match="does not exist"):
            await SqliteEventLog(db_path, read_only=True).open()
        assert not await anyio.Path(db_path).exists()

    @pytest.mark.parametrize("content", ["empty", "other tables"])
    async def test_read_only_flag_never_creates_the_schema(
        self, db_path: Path, content: str
    ) -> None:
        """A read-only open of a file without the store's tables fails clearly, changing
        nothing."""
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            if content != "empty":
                conn.execute("CREATE TABLE other (x)")
        before = await anyio.Path(db_path).read_bytes()
        with pytest.raises(StoreUnavailable, match="no event log tables"):
            await SqliteEventLog(db_path, read_only=True).open()
        assert before == await anyio.Path(db_path).read_bytes()

    async def test_version_2_file_opened_read_only(self, db_path: Path) -> None:
        """A version 2 file cannot be migrated read-only: a clear refusal, the file as it was."""
        write_v2_file(db_path, batch(), LeaseHolder("h", 1, "t"), "2000-01-01T00:00:00+00:00")
        with pytest.raises(StoreUnavailable, match="read-only") as caught:
            await SqliteEventLog(db_path, read_only=True).open()
        assert "version 2" in str(caught.value)

    def test_memory_database_cannot_be_read_only(self) -> None:
        """A read-only in-memory database would hold nothing: refused."""
        with pytest.raises(ValueError, match="read_only"):
            SqliteEventLog(":memory:", read_only=True)

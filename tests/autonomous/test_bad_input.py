"""Bad input around durable sessions: clear errors naming what was wrong, nothing lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from autonomous import Agent, StopReason, resume_autonomous, run_autonomous
from autonomous.testing import ScriptedModel, reply
from eventlog import (
    CorruptEvent,
    EventKind,
    SessionRef,
    SqliteEventLog,
    StoreUnavailable,
    UnknownSchemaVersion,
)

pytestmark = pytest.mark.anyio


def build_on(ref: SessionRef, model: ScriptedModel) -> Any:
    """A (re)build function for ``ref``."""

    def build(extra: list[Any], session_id: str | None = None) -> Agent:
        return Agent(model, tools=extra, session=ref)

    return build


async def one_turn(db: Path) -> list[int]:
    """Run one turn on a fresh session; the seqs of its events."""
    async with SqliteEventLog(db) as log:
        ref = SessionRef(log, "app", "user", "s1")
        await run_autonomous(build_on(ref, ScriptedModel([reply("hi")])), "go", max_turns=1)
        return [e.seq for e in await log.read(ref.key)]


def tamper(db: Path, sql: str, *params: object) -> None:
    """Change a stored row behind the log's back."""
    with sqlite3.connect(db) as conn:
        conn.execute(sql, params)


class TestCorruptRows:
    async def test_a_corrupt_checkpoint_row_names_the_session_and_the_event(
        self, tmp_path: Path
    ) -> None:
        """Resuming over an unreadable checkpoint raises CorruptEvent naming session, seq, id."""
        db = tmp_path / "c.db"
        await one_turn(db)
        tamper(db, "UPDATE events SET payload = '{not json' WHERE kind = 'checkpoint'")
        async with SqliteEventLog(db) as log:
            ref = SessionRef(log, "app", "user", "s1")
            with pytest.raises(CorruptEvent) as info:
                await resume_autonomous(build_on(ref, ScriptedModel()), ref)
            assert "app/user/s1" in str(info.value) and info.value.seq > 0
            assert info.value.event_id in str(info.value)

    async def test_a_checkpoint_from_a_newer_schema_fails_fast(self, tmp_path: Path) -> None:
        """An event written by a newer schema version raises UnknownSchemaVersion."""
        db = tmp_path / "v.db"
        await one_turn(db)
        tamper(db, "UPDATE events SET v = 99 WHERE kind = 'checkpoint'")
        async with SqliteEventLog(db) as log:
            ref = SessionRef(log, "app", "user", "s1")
            with pytest.raises(UnknownSchemaVersion, match="99"):
                await resume_autonomous(build_on(ref, ScriptedModel()), ref)

    async def test_nothing_already_written_is_rewritten(self, tmp_path: Path) -> None:
        """A failed resume leaves every stored event as it was."""
        db = tmp_path / "k.db"
        await one_turn(db)
        tamper(db, "UPDATE events SET v = 99 WHERE kind = 'checkpoint'")
        before = sqlite3.connect(db).execute("SELECT seq, payload FROM events").fetchall()
        async with SqliteEventLog(db) as log:
            ref = SessionRef(log, "app", "user", "s1")
            with pytest.raises(UnknownSchemaVersion):
                await resume_autonomous(build_on(ref, ScriptedModel()), ref)
        after = sqlite3.connect(db).execute("SELECT seq, payload FROM events").fetchall()
        assert before == after


class TestUnwritableStore:
    async def test_a_missing_database_directory_is_a_clear_error(self, tmp_path: Path) -> None:
        """A log in a directory that does not exist fails with StoreUnavailable naming it."""
        log = SqliteEventLog(tmp_path / "nowhere" / "x.db")
        ref = SessionRef(log, "app", "user", "s1")
        with pytest.raises(StoreUnavailable, match="nowhere"):
            await run_autonomous(build_on(ref, ScriptedModel([reply("x")])), "go", max_turns=1)
        await log.aclose()

    async def test_a_full_disk_stops_with_a_clear_error_and_keeps_what_was_written(
        self, tmp_path: Path
    ) -> None:
        """When the database is full the run fails with StoreUnavailable; old turns stay."""
        db = tmp_path / "full.db"
        await one_turn(db)
        async with SqliteEventLog(db) as log:
            ref = SessionRef(log, "app", "user", "s1")
            kept = await log.read(ref.key)
            # Simulate a full disk: the file may not grow past the pages it has now.
            db_conn = log._db
            assert db_conn is not None
            row = await (await db_conn.execute("PRAGMA page_count")).fetchone()
            assert row is not None
            pages = row[0]
            await db_conn.execute(f"PRAGMA max_page_count = {pages}")
            big = "x" * 20_000
            with pytest.raises(StoreUnavailable, match="full"):
                await resume_autonomous(
                    build_on(ref, ScriptedModel(default=reply(big))), ref, max_turns=3
                )
        async with SqliteEventLog(db) as log:
            assert [e.id for e in kept] == [e.id for e in await log.read(ref.key)]
            last = await log.latest_checkpoint(ref.key)
            assert last is not None and last.kind is EventKind.CHECKPOINT


def test_stop_reason_values_are_the_go_ones_plus_documented_additions() -> None:
    """The stop reasons keep the Go values; the additions are lease_lost and aborted."""
    go = {
        "completed",
        "max_turns_exceeded",
        "max_tokens_exceeded",
        "max_cost_exceeded",
        "wallclock_exceeded",
        "context_cancelled",
        "retry_policy_aborted",
        "deferred",
    }
    assert go | {"lease_lost", "aborted"} == {r.value for r in StopReason}

"""The CLI on a shared log: ``--db postgresql://...`` (and ``AUTONOMOUS_DB``) for every command."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from autonomous import run_autonomous
from autonomous._cli._common import CliError, open_log, record_spec
from autonomous._cli._daemon import Daemon
from autonomous._cli._exits import Exit
from autonomous._cli._spec_reader import load_spec
from autonomous._remote import send_control, send_inject
from eventlog import (
    Checkpoint,
    Claim,
    Event,
    EventKind,
    Lease,
    LeaseHolder,
    MemoryEventLog,
    SessionKey,
    SqliteEventLog,
    StoreUnavailable,
    UserMessage,
)
from scheduler import FakeClock

from ..autonomous.test_keeper_watch import NOTIFYING, FakeWatch
from .conftest import Background, cli, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'

#: What the error for a missing driver must tell the user to run.
EXTRA = "pip install 'bounded-autonomous[postgres]'"
URL = "postgresql://worker:s3cret@127.0.0.1:5432/test"


@pytest.fixture
def no_psycopg(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``import psycopg`` fails, as where the extra is not installed."""
    shadow = tmp_path / "shadow"
    (shadow / "psycopg").mkdir(parents=True)
    (shadow / "psycopg" / "__init__.py").write_text('raise ImportError("no psycopg here")\n')
    return {"PYTHONPATH": str(shadow)}


class TestOpenLog:
    """``open_log``: a SQLite path or a PostgreSQL URL."""

    def test_a_path_is_sqlite(self, tmp_path: Path) -> None:
        """A path (existing, or to be created) opens SQLite, as before."""
        log = open_log(argparse.Namespace(db=str(tmp_path / "x.db")), create=True)
        assert isinstance(log, SqliteEventLog)

    def test_missing_driver_is_one_clear_store_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without psycopg a URL is a store error naming the extra, the password not shown."""
        monkeypatch.setitem(sys.modules, "psycopg", None)
        with pytest.raises(CliError) as caught:
            open_log(argparse.Namespace(db=URL))
        assert Exit.STORE == caught.value.code
        assert EXTRA in str(caught.value)
        assert "s3cret" not in str(caught.value)

    @pytest.mark.parametrize("url", ["mysql://h/db", "sqlite:///x.db"])
    def test_another_scheme_is_refused(self, url: str) -> None:
        """A URL of a store this runtime does not have is a usage error naming the scheme."""
        with pytest.raises(CliError) as caught:
            open_log(argparse.Namespace(db=url), create=True)
        assert (Exit.USAGE, True) == (caught.value.code, url.partition(":")[0] in str(caught.value))


class TestEveryCommandTakesAUrl:
    """Every command that opens the log reads a URL from --db or AUTONOMOUS_DB."""

    @pytest.mark.parametrize(
        "command",
        [
            ("ls",),
            ("run", "quick.toml"),
            ("show", "s1"),
            ("inject", "s1", "hello"),
            ("pause", "s1"),
            ("unpause", "s1"),
            ("stop", "s1"),
            ("prune", "--before", "1d"),
            ("resume", "s1"),
            ("daemon", "--once"),
        ],
    )
    def test_the_env_var_names_a_postgres_log(
        self, agent_dir: Path, no_psycopg: dict[str, str], command: tuple[str, ...]
    ) -> None:
        """With psycopg missing, each command fails on the URL (exit 4), naming the extra."""
        write_spec(agent_dir, "quick", "quick")
        done = cli(agent_dir, *command, env={**no_psycopg, "AUTONOMOUS_DB": URL})
        assert (Exit.STORE, 1) == (done.returncode, done.stderr.count(EXTRA)), done.stderr
        assert "s3cret" not in done.stderr

    def test_the_flag_wins_over_the_env_var(
        self, agent_dir: Path, no_psycopg: dict[str, str]
    ) -> None:
        """``--db postgres://...`` is a URL too, and wins over a SQLite AUTONOMOUS_DB."""
        env = {**no_psycopg, "AUTONOMOUS_DB": str(agent_dir / "x.db")}
        done = cli(agent_dir, "ls", "--db", "postgres://127.0.0.1/test", env=env)
        assert (Exit.STORE, True) == (done.returncode, EXTRA in done.stderr), done.stderr

    def test_help_names_the_url_form(self, agent_dir: Path) -> None:
        """``--help`` says --db takes a postgresql:// URL."""
        assert "postgresql://" in cli(agent_dir, "ls", "--help").stdout


class FleetLog(MemoryEventLog):
    """An in-memory log on the test's clock that counts the lease calls the daemon makes;
    ``renew_fails`` makes every batched renewal fail (a store that is down for a while)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock.now)
        self.calls: Counter[str] = Counter()
        self.batches: list[int] = []  # the size of each renew_leases call
        self.renew_fails = False

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Count, then acquire."""
        self.calls["acquire_lease"] += 1
        return await super().acquire_lease(key, holder, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Count, then renew one."""
        self.calls["renew_lease"] += 1
        return await super().renew_lease(lease, ttl)

    async def renew_leases(self, leases: Sequence[Lease], ttl: float) -> list[Lease]:
        """Record the batch, then renew it (or fail, with ``renew_fails``)."""
        self.batches.append(len(leases))
        if self.renew_fails:
            raise StoreUnavailable("the test's store is down")
        return await super().renew_leases(leases, ttl)

    async def claim_due(
        self,
        now: datetime,
        holder: LeaseHolder,
        ttl: float,
        *,
        limit: int,
        interrupted: bool = False,
    ) -> list[Claim]:
        """Count, then claim."""
        self.calls["claim_due"] += 1
        return await super().claim_due(now, holder, ttl, limit=limit, interrupted=interrupted)


class WatchedFleetLog(FleetLog):
    """A FleetLog with ``watch``: every inbox, control or checkpoint append wakes the watches."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.watches: list[tuple[SessionKey | None, FakeWatch]] = []

    @contextlib.asynccontextmanager
    async def watch(self, key: SessionKey | None = None) -> AsyncIterator[FakeWatch]:
        """Watch one session (None: all of them) while the block is open."""
        entry = (key, FakeWatch())
        self.watches.append(entry)
        try:
            yield entry[1]
        finally:
            self.watches.remove(entry)

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Append, then notify."""
        seqs = await super().append(events, lease=lease)
        for event in events:
            for key, watch in self.watches:
                if event.kind in NOTIFYING and key in (None, event.key):
                    watch.notify()
        return seqs


async def until(condition: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (ten real seconds at most) until ``condition()`` holds; the runs and the daemon
    go on between looks, the daemon's clock stands still."""
    for _ in range(1000):
        value = condition()
        if await value if inspect.isawaitable(value) else value:
            return
        await anyio.sleep(0.01)
    raise AssertionError("the condition never held")


@attrs.define
class Fleet:
    """One in-process daemon on a FleetLog and a FakeClock, and what it reported."""

    log: FleetLog
    clock: FakeClock
    daemon: Daemon
    reports: list[tuple[str, dict[str, Any]]]

    def events(self, name: str) -> list[dict[str, Any]]:
        """The fields of every ``name`` report so far."""
        return [fields for event, fields in self.reports if event == name]

    async def turns(self, session_id: str) -> list[int]:
        """The turns of a session's user messages."""
        key = SessionKey("tests", "tester", session_id)
        return [
            e.payload.turn
            for e in await self.log.read(key, kinds=[EventKind.USER_MESSAGE])
            if isinstance(e.payload, UserMessage)
        ]


async def deferred_fleet(
    agent_dir: Path, ids: Sequence[str], *, watched: bool = False, poll: float = 10
) -> Fleet:
    """Sessions of the spec ``later`` (deferring, then looping until an inbox message), each
    deferred once, and a daemon (not started) whose clock is past their wake times."""
    spec = load_spec(write_spec(agent_dir, "later", "deferring_then_looping", extra=DEFERRING))
    clock = FakeClock()
    log = (WatchedFleetLog if watched else FleetLog)(clock)
    wake = clock.now()
    for session_id in ids:
        ref = spec.session_ref(log, session_id)
        await record_spec(log, ref.key, spec, None)
        result = await run_autonomous(spec.build_function(ref), spec.goal, **spec.run_options())
        assert result.next_wake_at is not None
        wake = max(wake, result.next_wake_at)
    clock.advance((wake - clock.now()).total_seconds() + 1)
    reports: list[tuple[str, dict[str, Any]]] = []
    daemon = Daemon(
        log,
        poll=poll,
        once=False,
        crashed=False,
        report=lambda event, **fields: reports.append((event, fields)),
        clock=clock,
        lease_ttl=30,
    )
    return Fleet(log, clock, daemon, reports)


def key_of(session_id: str) -> SessionKey:
    """The key of a session of the tests' spec."""
    return SessionKey("tests", "tester", session_id)


class TestDaemonClaims:
    """The daemon as a fleet member: claims with leases, one batched heartbeat, release."""

    @pytest.mark.anyio
    async def test_runs_adopt_their_claims_and_one_call_renews_them_all(
        self, in_process: Path
    ) -> None:
        """Two claimed sessions run on their claims (no acquire, no renewal of their own);
        a third of the TTL later one renew_leases call renews both; each lease is released
        when its run ends."""
        fleet = await deferred_fleet(in_process, ["r1", "r2"])
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: _async_len_at_least(fleet.turns("r1"), 3))
            await until(lambda: _async_len_at_least(fleet.turns("r2"), 3))
            assert [] == fleet.log.batches
            fleet.clock.advance(10)  # a third of 30 s: the heartbeat
            await until(lambda: fleet.log.batches == [2])
            for sid in ("r1", "r2"):
                await send_inject(fleet.log, key_of(sid), "finish now")
            await until(lambda: len(fleet.events("finished")) == 2)
            tg.cancel_scope.cancel()
        assert {"completed"} == {f["reason"] for f in fleet.events("finished")}
        assert (0, 0) == (fleet.log.calls["acquire_lease"], fleet.log.calls["renew_lease"])
        assert [None, None] == [s.holder for s in await fleet.log.sessions()]

    @pytest.mark.anyio
    async def test_a_lease_the_renewal_leaves_out_stops_its_run_writing_nothing_more(
        self, in_process: Path
    ) -> None:
        """The store is down past the lease's expiry, another worker takes the idle (paused)
        session over; the next renewal leaves it out and the run stops as lease_lost, with
        no event written after the takeover."""
        fleet = await deferred_fleet(in_process, ["t1"])
        key = key_of("t1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: _async_len_at_least(fleet.turns("t1"), 3))
            await send_control(fleet.log, key, "pause")
            await until(lambda: _latest_paused(fleet.log, key))
            fleet.log.renew_fails = True
            fleet.clock.advance(31)  # one renewal fails; the lease is past its expiry
            await until(lambda: len(fleet.log.batches) == 1)
            other = await fleet.log.acquire_lease(key, LeaseHolder.this_process(), 30)
            written = len(await fleet.log.read(key))
            fleet.log.renew_fails = False
            fleet.clock.advance(10)
            await until(lambda: bool(fleet.events("finished")))
            tg.cancel_scope.cancel()
        assert ["lease_lost"] == [f["reason"] for f in fleet.events("finished")]
        assert written == len(await fleet.log.read(key)), "the run wrote after the takeover"
        assert [str(other.holder)] == [s.holder for s in await fleet.log.sessions()]

    @pytest.mark.anyio
    async def test_a_shutdown_hands_back_and_releases_at_once(self, in_process: Path) -> None:
        """Cancelled, the daemon hands its running session back as due and lets its lease
        go: another worker may claim it at once, not after the lease's expiry."""
        fleet = await deferred_fleet(in_process, ["h1"])
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: _async_len_at_least(fleet.turns("h1"), 3))
            tg.cancel_scope.cancel()
        assert 1 == len(fleet.events("handed_back"))
        (summary,) = await fleet.log.sessions()
        assert (None, "deferred") == (summary.holder, summary.stop_reason)
        claims = await fleet.log.claim_due(
            fleet.clock.now(), LeaseHolder.this_process(), 30, limit=5
        )
        assert [key_of("h1")] == [c.summary.key for c in claims]


class TestDaemonWatch:
    """A store with ``watch``: the daemon's wait for due sessions ends on its notifications."""

    @pytest.mark.anyio
    async def test_an_unpause_reaches_a_daemon_between_polls(self, in_process: Path) -> None:
        """A due session paused while the daemon waits an hour between polls is resumed as
        soon as it is unpaused, the clock not moving."""
        fleet = await deferred_fleet(in_process, ["w1"], watched=True, poll=3600)
        key = key_of("w1")
        await send_control(fleet.log, key, "pause")
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.daemon.serve)
            await until(lambda: bool(fleet.events("paused")))
            await until(lambda: fleet.clock.sleepers == 1)  # the poll; nothing is held
            await send_control(fleet.log, key, "resume")
            await until(lambda: bool(fleet.events("resuming")))
            await until(lambda: _async_len_at_least(fleet.turns("w1"), 3))
            await send_inject(fleet.log, key, "finish now")
            await until(lambda: bool(fleet.events("finished")))
            tg.cancel_scope.cancel()
        assert ["completed"] == [f["reason"] for f in fleet.events("finished")]


async def _async_len_at_least(turns: Awaitable[list[int]], n: int) -> bool:
    """Whether the awaited list has at least ``n`` items."""
    return len(await turns) >= n


async def _latest_paused(log: MemoryEventLog, key: SessionKey) -> bool:
    """Whether the session's latest checkpoint says the run is parked by a pause."""
    latest = await log.latest_checkpoint(key)
    return latest is not None and isinstance(latest.payload, Checkpoint) and latest.payload.paused


@pytest.fixture
def on_postgres(agent_dir: Path, pg_dsn: str) -> dict[str, str]:
    """The environment that points every command at a fresh PostgreSQL schema."""
    return {"AUTONOMOUS_DB": pg_dsn}


def pg_json(cwd: Path, env: dict[str, str], *args: str) -> Any:
    """``ARGS --json`` against Postgres succeeded; its document."""
    done = cli(cwd, *args, "--json", env=env)
    assert 0 == done.returncode, done.stderr
    return json.loads(done.stdout)


def statuses(cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """``ls --json``: each session id's status."""
    return {row["session_id"]: row["status"] for row in pg_json(cwd, env, "ls")}


@pytest.mark.postgres
class TestOnPostgres:
    """Every command against a PostgreSQL log, as against SQLite."""

    def test_run_defer_then_daemon_once_then_ls_and_show(
        self, agent_dir: Path, on_postgres: dict[str, str]
    ) -> None:
        """A session deferred by ``run`` is resumed by ``daemon --once`` and completes; ls
        and show read it back from the server."""
        write_spec(agent_dir, "later", "deferring", extra=DEFERRING)
        ran = cli(agent_dir, "run", "later.toml", "--session", "p1", "-q", env=on_postgres)
        assert 10 == ran.returncode, ran.stderr
        assert statuses(agent_dir, on_postgres)["p1"] in ("deferred", "due")  # by the clock
        time.sleep(1.1)  # the wake time is a second of wall clock away
        done = cli(agent_dir, "daemon", "--once", "--json", env=on_postgres)
        assert 0 == done.returncode, done.stderr
        events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
        assert ["daemon_started", "resuming", "finished", "daemon_stopped"] == events
        assert {"p1": "completed"} == statuses(agent_dir, on_postgres)
        shown = pg_json(agent_dir, on_postgres, "show", "p1")
        turns = [e["payload"]["turn"] for e in shown if e["kind"] == "user_message"]
        stops = [e["payload"].get("stop_reason") for e in shown if e["kind"] == "checkpoint"]
        assert ([1, 2], ["deferred", "completed"]) == (turns, stops[-2:])

    def test_inject_stop_and_prune(self, agent_dir: Path, on_postgres: dict[str, str]) -> None:
        """inject and stop reach a napping session in the server's log; prune drops the old
        events of a finished one and keeps its summary."""
        write_spec(agent_dir, "nap", "napping", extra=DEFERRING)
        write_spec(agent_dir, "quick", "quick")
        assert (
            10
            == cli(
                agent_dir, "run", "nap.toml", "--session", "n1", "-q", env=on_postgres
            ).returncode
        )
        assert (
            0
            == cli(
                agent_dir, "run", "quick.toml", "--session", "q1", "-q", env=on_postgres
            ).returncode
        )
        assert 0 == cli(agent_dir, "inject", "n1", "hello", env=on_postgres).returncode
        assert 0 == cli(agent_dir, "stop", "n1", env=on_postgres).returncode
        assert {"n1": "stopped", "q1": "completed"} == statuses(agent_dir, on_postgres)
        kinds = [e["kind"] for e in pg_json(agent_dir, on_postgres, "show", "n1")]
        assert ("inbox_queued", "control") == tuple(kinds[-2:])
        pruned = pg_json(agent_dir, on_postgres, "prune", "--before", "0s")
        assert "q1" in [row["session"].split("/")[-1] for row in pruned["pruned"]], pruned
        assert "completed" == statuses(agent_dir, on_postgres)["q1"]

    def test_a_waiting_daemon_takes_a_new_session_at_once(
        self, agent_dir: Path, on_postgres: dict[str, str], start: Callable[..., Background]
    ) -> None:
        """A daemon polling every ten minutes resumes a session deferred meanwhile when it
        is due: the session's checkpoint notified its watch (no poll came)."""
        daemon = start(
            agent_dir, "daemon", "--db", on_postgres["AUTONOMOUS_DB"], "--poll", "600", "--json"
        )
        daemon.wait_for('"daemon_started"', stream="stdout", timeout=30)
        write_spec(agent_dir, "later", "deferring", extra=DEFERRING)
        ran = cli(agent_dir, "run", "later.toml", "--session", "w1", "-q", env=on_postgres)
        assert 10 == ran.returncode, ran.stderr
        daemon.wait_for('"finished".*"reason": "completed"', stream="stdout", timeout=30)
        daemon.proc.send_signal(signal.SIGTERM)
        assert 128 + signal.SIGTERM == daemon.finish()
        assert {"w1": "completed"} == statuses(agent_dir, on_postgres)

    def test_an_inject_reaches_a_live_run_between_its_polls(
        self, agent_dir: Path, on_postgres: dict[str, str], start: Callable[..., Background]
    ) -> None:
        """A run polling its log every ten minutes gets an inject from another process
        through the server's notification, and finishes on it."""
        write_spec(agent_dir, "loop", "looping", extra="[run]\ncontrol_poll = 600\n")
        run = start(
            agent_dir, "run", "loop.toml", "--session", "k1", "--db", on_postgres["AUTONOMOUS_DB"]
        )
        run.wait_for(r"^turn 2 \|", timeout=30)
        assert 0 == cli(agent_dir, "inject", "k1", "finish now", env=on_postgres).returncode
        assert 0 == run.finish(timeout=30)
        assert {"k1": "completed"} == statuses(agent_dir, on_postgres)

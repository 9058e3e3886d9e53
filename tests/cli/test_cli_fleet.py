"""The CLI on a shared log: ``--db postgresql://...`` (and ``AUTONOMOUS_DB``) for every command,
end to end against the PostgreSQL server (the daemon in-process: test_daemon_fleet.py)."""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from autonomous._cli._common import SPEC_NOTE, CliError, open_log
from autonomous._cli._exits import Exit
from eventlog import SqliteEventLog

from ..support.postgres import server_dsn
from .conftest import Background, cli, session_events, wait_until_due, write_spec

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
        wait_until_due(agent_dir, env=on_postgres)
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

    def test_a_daemon_goes_on_after_the_server_drops_its_connections(
        self, agent_dir: Path, on_postgres: dict[str, str], start: Callable[..., Background]
    ) -> None:
        """The server ends every connection of a waiting daemon (a restart, a failover, an
        idle timeout): the daemon goes on, and a session deferred afterwards is resumed once
        it is due and completes."""
        app = f"daemon_{secrets.token_hex(4)}"
        dsn = f"{on_postgres['AUTONOMOUS_DB']}&application_name={app}"
        daemon = start(agent_dir, "daemon", "--db", dsn, "--poll", "0.2", "--json")
        daemon.wait_for('"daemon_started"', stream="stdout", timeout=30)
        deadline = time.monotonic() + 30
        while idle_connections(app) == 0:  # the pool's connections made, and between polls
            assert time.monotonic() < deadline, "the daemon never connected"
            time.sleep(0.02)
        assert drop_connections(app) > 0
        write_spec(agent_dir, "later", "deferring", extra=DEFERRING)
        ran = cli(agent_dir, "run", "later.toml", "--session", "r1", "-q", env=on_postgres)
        assert 10 == ran.returncode, ran.stderr
        daemon.wait_for('"finished".*"reason": "completed"', stream="stdout", timeout=30)
        assert None is daemon.proc.poll(), daemon.lines["stderr"]
        assert {"r1": "completed"} == statuses(agent_dir, on_postgres)
        daemon.proc.send_signal(signal.SIGTERM)
        assert 128 + signal.SIGTERM == daemon.finish()


def idle_connections(app: str) -> int:
    """How many connections named ``app`` the server has, waiting for their next query."""
    with psycopg.connect(server_dsn(), autocommit=True) as conn:
        idle = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'",
            (app,),
        ).fetchone()
    assert idle is not None
    return int(idle[0])


def drop_connections(app: str) -> int:
    """End, from the server's side, every connection named ``app``; how many there were."""
    with psycopg.connect(server_dsn(), autocommit=True) as conn:
        ended = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (app,),
        ).fetchone()
    assert ended is not None
    return int(ended[0])


class TestResumeAdopts:
    """``resume`` of a session whose spec file was edited."""

    def test_resume_runs_an_edited_spec_and_records_it(self, agent_dir: Path) -> None:
        """``resume`` (an operator's choice) runs the spec as the file is now and records its
        new digest, so the daemons follow."""
        spec = write_spec(agent_dir, "later", "deferring", extra=DEFERRING)
        assert 10 == cli(agent_dir, "run", "later.toml", "--session", "e1", "-q").returncode
        spec.write_text(spec.read_text().replace("You are a test agent.", "You are another."))
        wait_until_due(agent_dir)
        done = cli(agent_dir, "resume", "e1", "-q")
        assert 0 == done.returncode, done.stderr
        digests = [
            e["payload"]["data"].get("digest")
            for e in session_events(agent_dir, "e1")
            if e["kind"] == "note" and e["payload"]["text"] == SPEC_NOTE
        ]
        now = "sha256:" + hashlib.sha256(spec.read_bytes()).hexdigest()
        assert (2, now) == (len(digests), digests[-1]), digests

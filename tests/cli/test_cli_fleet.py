"""The CLI on a shared log: ``--db postgresql://...`` (and ``AUTONOMOUS_DB``) for every command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from autonomous._cli._common import CliError, open_log
from autonomous._cli._exits import Exit
from eventlog import SqliteEventLog

from .conftest import cli, write_spec

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

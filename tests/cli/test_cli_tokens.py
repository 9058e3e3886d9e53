"""``autonomous token create|ls|revoke``: the HTTP API's tokens from the command line, on SQLite
and PostgreSQL; a secret printed once and kept nowhere."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.requests import Request

from autonomous.server import Principal, Scope, token_auth
from autonomous.server._tokens import digest

from ..autonomous.stores import DurableStore
from .conftest import cli, log_of


def created(cwd: Path, *args: str) -> dict[str, Any]:
    """``token create ARGS --json`` succeeded; its document."""
    done = cli(cwd, "token", "create", *args, "--json")
    assert 0 == done.returncode, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def listed(cwd: Path) -> list[dict[str, Any]]:
    """``token ls --json``: its rows."""
    done = cli(cwd, "token", "ls", "--json")
    assert 0 == done.returncode, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def principal(cwd: Path, secret: str) -> Principal | None:
    """Who a request bearing ``secret`` is to a server on the commands' log."""

    async def ask() -> Principal | None:
        async with log_of(cwd) as log:
            request = Request(
                {"type": "http", "headers": [(b"authorization", f"Bearer {secret}".encode())]}
            )
            return await token_auth(log)(request)

    found: Principal | None = anyio.run(ask, backend="asyncio")
    return found


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command wrote (nothing on standard output)."""
    lines = done.stderr.strip().splitlines()
    assert ("", 1) == (done.stdout, len(lines)), (done.stdout, done.stderr)
    assert lines[0].startswith("error: "), lines
    return lines[0]


class TestCreate:
    def test_the_secret_is_printed_once_alone_and_proves_the_token(
        self, agent_dir: Path, cli_store: DurableStore
    ) -> None:
        """Plain create: the secret alone on standard output, a note on standard error that it
        is not shown again; a request bearing it is the token's principal."""
        done = cli(agent_dir, "token", "create", "deploy", "--scope", "operator", "--app", "b")
        assert 0 == done.returncode, done.stderr
        secret = done.stdout.strip()
        assert [secret] == done.stdout.splitlines() and secret.startswith("ba_")
        assert "never again" in done.stderr and secret not in done.stderr
        assert Principal("deploy", Scope.OPERATOR, "b") == principal(agent_dir, secret)

    def test_json_holds_the_secret_and_the_terms(
        self, agent_dir: Path, cli_store: DurableStore
    ) -> None:
        """--json: name, scope, app, expiry and the secret; --expires counts from now."""
        before = datetime.now().astimezone()
        document = created(agent_dir, "viewer-1", "--scope", "viewer", "--expires", "30d")
        expires = datetime.fromisoformat(document["expires_at"])
        assert timedelta(days=30) <= expires - before <= timedelta(days=30, minutes=1)
        assert ("viewer-1", "viewer", None, "active") == (
            document["name"],
            document["scope"],
            document["app"],
            document["status"],
        )
        assert Principal("viewer-1", Scope.VIEWER) == principal(agent_dir, document["secret"])

    def test_every_scope_and_the_common_options_anywhere(
        self, agent_dir: Path, cli_store: DurableStore
    ) -> None:
        """Each scope is taken; --json before the command works as after it."""
        for scope in ("viewer", "operator", "admin"):
            done = cli(agent_dir, "--json", "token", "create", f"t-{scope}", "--scope", scope)
            assert 0 == done.returncode, done.stderr
            assert scope == json.loads(done.stdout)["scope"]
        assert ["t-viewer", "t-operator", "t-admin"] == [r["name"] for r in listed(agent_dir)]

    def test_create_makes_a_new_sqlite_log(self, tmp_path: Path) -> None:
        """A token may be made before any run: --db names a file that does not exist yet."""
        db = tmp_path / "fresh.db"
        done = cli(tmp_path, "token", "create", "first", "--scope", "admin", "--db", str(db))
        assert 0 == done.returncode, done.stderr
        secret = done.stdout.strip()
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("fresh.db*"))
        assert secret.encode() not in raw  # the file keeps the digest only
        assert digest(secret).encode() in raw


class TestBadInput:
    @pytest.mark.parametrize(
        ("args", "says"),
        [
            (["t", "--scope", "root"], "--scope must be one of viewer, operator, admin"),
            (["t", "--scope", "admin", "--expires", "3q"], "--expires: '3q' is not a duration"),
            (["t", "--scope", "admin", "--expires", "0s"], "more than 0 seconds"),
            (["t", "--scope", "admin", "--expires", "1e400"], "--expires"),
            (["  ", "--scope", "admin"], "name must not be blank"),
            (["t", "--scope", "admin", "--app", ""], "app must not be blank"),
        ],
        ids=["scope", "duration", "zero", "overflow", "blank-name", "blank-app"],
    )
    def test_a_usage_error_is_one_line_and_2(
        self, agent_dir: Path, cli_store: DurableStore, args: list[str], says: str
    ) -> None:
        """Bad input is exit 2 with one line saying what is wrong; no token is made."""
        cli(agent_dir, "token", "create", "seed", "--scope", "viewer")  # the log exists
        done = cli(agent_dir, "token", "create", *args)
        assert 2 == done.returncode
        assert says in one_line_error(done)
        assert ["seed"] == [r["name"] for r in listed(agent_dir)]

    def test_a_name_taken_is_one_line_and_1(self, agent_dir: Path, cli_store: DurableStore) -> None:
        """A second token of a name, even a revoked one's, is refused: exit 1, one line."""
        first = created(agent_dir, "ci", "--scope", "viewer")
        done = cli(agent_dir, "token", "create", "ci", "--scope", "admin")
        assert 1 == done.returncode
        assert "'ci' exists already" in one_line_error(done)
        assert 0 == cli(agent_dir, "token", "revoke", "ci").returncode
        assert 1 == cli(agent_dir, "token", "create", "ci", "--scope", "admin").returncode
        assert [("ci", "viewer")] == [(r["name"], r["scope"]) for r in listed(agent_dir)]
        assert None is principal(agent_dir, first["secret"])

    def test_no_log_is_an_error_for_ls_and_revoke(self, tmp_path: Path) -> None:
        """ls and revoke never create a SQLite log: a missing one is one line."""
        for args in (["ls"], ["revoke", "x"]):
            done = cli(tmp_path, "token", *args)
            assert 2 == done.returncode
            assert "no event log" in one_line_error(done)
        assert not (tmp_path / "autonomous.db").exists()

    def test_a_token_command_is_required(self, agent_dir: Path) -> None:
        """``token`` alone is a usage error."""
        assert 2 == cli(agent_dir, "token").returncode


class TestListAndRevoke:
    def test_ls_shows_no_secret_and_no_digest(
        self, agent_dir: Path, cli_store: DurableStore
    ) -> None:
        """ls (plain and --json) names each token with its terms, never its secret or digest."""
        a = created(agent_dir, "a", "--scope", "admin")["secret"]
        b = created(agent_dir, "b", "--scope", "viewer", "--app", "shop", "--expires", "1h")[
            "secret"
        ]
        plain = cli(agent_dir, "token", "ls")
        as_json = cli(agent_dir, "token", "ls", "--json")
        assert (0, 0) == (plain.returncode, as_json.returncode)
        rows = json.loads(as_json.stdout)
        assert [("a", "admin", None, "active"), ("b", "viewer", "shop", "active")] == [
            (r["name"], r["scope"], r["app"], r["status"]) for r in rows
        ]
        assert {"name", "scope", "app", "status", "created_at", "expires_at", "revoked_at"} == set(
            rows[0]
        )
        out = plain.stdout + as_json.stdout
        assert [] == [s for s in (a, b, digest(a), digest(b)) if s in out]
        lines = plain.stdout.splitlines()
        assert lines[0].split() == ["NAME", "SCOPE", "APP", "STATUS", "CREATED", "EXPIRES"]
        assert lines[1].split()[:4] == ["a", "admin", "*", "active"] and "never" in lines[1]
        assert lines[2].split()[:4] == ["b", "viewer", "shop", "active"]

    def test_an_empty_list(self, agent_dir: Path, cli_store: DurableStore) -> None:
        """A log without tokens: 'no tokens', and [] with --json."""

        async def make() -> None:
            async with cli_store.open() as log:
                await log.open()

        anyio.run(make, backend="asyncio")
        done = cli(agent_dir, "token", "ls")
        assert (0, "no tokens\n") == (done.returncode, done.stdout)
        assert [] == listed(agent_dir)

    def test_a_revoked_token_stays_listed(self, agent_dir: Path, cli_store: DurableStore) -> None:
        """A revoked token is still listed (its name is never reused)."""
        cli(agent_dir, "token", "create", "x", "--scope", "viewer")
        cli(agent_dir, "token", "revoke", "x")
        assert [("x", "revoked")] == [(r["name"], r["status"]) for r in listed(agent_dir)]

    def test_revoke_refuses_the_token_from_now_on(
        self, agent_dir: Path, cli_store: DurableStore
    ) -> None:
        """Revoked: its requests prove nothing, ls says revoked; revoking again is harmless."""
        secret = created(agent_dir, "ci", "--scope", "operator")["secret"]
        other = created(agent_dir, "keep", "--scope", "viewer")["secret"]
        done = cli(agent_dir, "token", "revoke", "ci")
        assert (0, "revoked token 'ci'") == (done.returncode, done.stdout.split(":")[0])
        assert None is principal(agent_dir, secret)
        assert Principal("keep", Scope.VIEWER) == principal(agent_dir, other)
        rows = {r["name"]: r for r in listed(agent_dir)}
        assert ("revoked", "active") == (rows["ci"]["status"], rows["keep"]["status"])
        again = cli(agent_dir, "token", "revoke", "ci", "--json")
        assert 0 == again.returncode
        assert rows["ci"]["revoked_at"] == json.loads(again.stdout)["revoked_at"]
        assert "revoked already" in cli(agent_dir, "token", "revoke", "ci").stdout

    def test_revoking_an_unknown_name_is_one_line_and_1(
        self, agent_dir: Path, cli_store: DurableStore
    ) -> None:
        """An unknown name: exit 1, one line naming it."""
        cli(agent_dir, "token", "create", "x", "--scope", "viewer")
        done = cli(agent_dir, "token", "revoke", "nobody")
        assert 1 == done.returncode
        assert "'nobody'" in one_line_error(done)

"""``autonomous serve``: the HTTP control API as a command, secure by default.

A real process on 127.0.0.1 and port 0 (it prints where it listens), asked with httpx: a log
without tokens is served openly on loopback only, loudly; once a token exists every request
needs one; SIGINT ends it cleanly.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from autonomous._cli._common import CliError
from autonomous._cli._serve import is_loopback, parse_listen

from .conftest import Background, cli


def url_of(server: Background) -> str:
    """The base URL a started server printed."""
    return server.wait_for(r"^serving http://", stream="stdout", timeout=30).split()[1]


class TestServe:
    def test_a_log_without_tokens_is_open_on_loopback_and_says_so(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        server = start(agent_dir, "serve", "--listen", "127.0.0.1:0")
        base = url_of(server)
        server.wait_for("WARNING: the log has no tokens")
        assert 200 == httpx.get(f"{base}/healthz", timeout=10).status_code
        listed = httpx.get(f"{base}/v1/sessions", timeout=10)
        assert (200, []) == (listed.status_code, listed.json()["sessions"])
        # a token made while it runs closes it at once
        made = cli(agent_dir, "token", "create", "ops", "--scope", "viewer")
        assert 0 == made.returncode, made.stderr
        secret = made.stdout.strip()
        assert 401 == httpx.get(f"{base}/v1/sessions", timeout=10).status_code
        auth = {"Authorization": f"Bearer {secret}"}
        assert 200 == httpx.get(f"{base}/v1/sessions", headers=auth, timeout=10).status_code
        server.proc.send_signal(signal.SIGINT)
        assert server.finish(timeout=30) in (0, 130)

    def test_with_a_token_every_request_needs_one(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        made = cli(agent_dir, "token", "create", "ops", "--scope", "operator")
        assert 0 == made.returncode, made.stderr
        server = start(agent_dir, "serve", "--listen", "127.0.0.1:0")
        base = url_of(server)
        assert 401 == httpx.get(f"{base}/v1/sessions", timeout=10).status_code
        auth = {"Authorization": f"Bearer {made.stdout.strip()}"}
        assert 200 == httpx.get(f"{base}/v1/sessions", headers=auth, timeout=10).status_code
        assert 0 == server.count("WARNING")
        server.proc.send_signal(signal.SIGINT)
        assert server.finish(timeout=30) in (0, 130)

    def test_no_tokens_on_another_address_is_refused(self, agent_dir: Path) -> None:
        done = cli(agent_dir, "serve", "--listen", "0.0.0.0:0")
        assert 0 != done.returncode
        assert "refusing to serve 0.0.0.0 without them" in done.stderr
        assert "--insecure-no-auth" in done.stderr

    def test_a_bad_listen_address_is_one_line(self, agent_dir: Path) -> None:
        done = cli(agent_dir, "serve", "--listen", "nowhere")
        assert (2, 1) == (done.returncode, len(done.stderr.strip().splitlines()))
        assert "--listen wants HOST:PORT" in done.stderr


class TestAddresses:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [("127.0.0.1:8700", ("127.0.0.1", 8700)), ("[::1]:0", ("::1", 0)), ("h:1", ("h", 1))],
    )
    def test_parsed(self, text: str, expected: tuple[str, int]) -> None:
        assert expected == parse_listen(text)

    @pytest.mark.parametrize("text", ["8700", ":8700", "h:", "h:x", "h:70000"])
    def test_refused(self, text: str) -> None:
        with pytest.raises(CliError, match="HOST:PORT"):
            parse_listen(text)

    @pytest.mark.parametrize(
        ("host", "loopback"),
        [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("localhost", True),
         ("0.0.0.0", False), ("10.0.0.1", False), ("example.org", False)],
    )  # fmt: skip
    def test_loopback(self, host: str, loopback: bool) -> None:
        assert loopback == is_loopback(host)

"""``[[mcp]]`` tables in agent specs: read into MCP servers, checked by ``autonomous validate``
(the command exists, the URL parses), each problem naming the file, the line and the table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autonomous import ConfigurationError
from autonomous.mcp import MCPServer
from autonomous.spec._reader import load_spec, read_spec
from autonomous.spec._validate import validate
from eventlog import MemoryEventLog

pytestmark = pytest.mark.mcp

HEAD = 'name = "m"\nmodel = "scripted:brains:quick"\ninstructions = "x"\n'


def problems(path: Path) -> dict[str, str]:
    """Each error of the spec: ``file:line: key`` (without the directory) to its message."""
    return {
        p.where.removeprefix(f"{path.parent}/"): p.message
        for p in validate(path, interactive=False)
        if p.severity == "error"
    }


class TestReading:
    def test_stdio_and_http_tables_become_servers(self, in_process: Path) -> None:
        """A command table is a stdio server started in the agent's directory; a url table
        an HTTP one with its headers."""
        (in_process / "servers").mkdir()
        path = in_process / "m.toml"
        path.write_text(
            HEAD + f'[[mcp]]\nname = "disk"\ncommand = "{sys.executable}"\nargs = ["-m", "disk"]\n'
            'env = { ROOT = "/" }\ncwd = "servers"\n'
            '[[mcp]]\nname = "tickets"\nurl = "https://mcp.example.org/mcp"\n'
            'headers = { X-Team = "ops" }\n'
        )
        spec = load_spec(path)
        disk, tickets = spec.mcp_servers()
        assert (
            MCPServer.stdio(
                sys.executable,
                ["-m", "disk"],
                env={"ROOT": "/"},
                cwd=in_process / "servers",
                name="disk",
            )
            == disk
        )
        assert ("http", "tickets", {"X-Team": "ops"}) == (
            tickets.kind,
            tickets.name,
            dict(tickets.headers or {}),
        )
        build = spec.build_function(spec.session_ref(MemoryEventLog(), "s1"))
        assert (disk, tickets) == build([]).mcp_servers

    def test_a_relative_command_path_is_taken_from_the_agent_directory(
        self, in_process: Path
    ) -> None:
        """command = "./serve" starts the agent's own script; cwd defaults to its directory."""
        path = in_process / "m.toml"
        path.write_text(HEAD + '[[mcp]]\nname = "own"\ncommand = "./serve"\n')
        (server,) = load_spec(path).mcp_servers()
        assert (str(in_process / "serve"), str(in_process)) == (server.command, server.cwd)

    def test_connect_timeout_sets_the_servers_start_bound(self, in_process: Path) -> None:
        """connect_timeout takes seconds or a duration, on either kind; without it, 30 s."""
        path = in_process / "m.toml"
        path.write_text(
            HEAD + f'[[mcp]]\nname = "slow"\ncommand = "{sys.executable}"\nconnect_timeout = "2m"\n'
            '[[mcp]]\nname = "web"\nurl = "https://h/mcp"\nconnect_timeout = 7.5\n'
            '[[mcp]]\nname = "plain"\nurl = "https://h/mcp"\n'
        )
        assert [120.0, 7.5, 30.0] == [s.connect_timeout for s in load_spec(path).mcp_servers()]

    @pytest.mark.parametrize("value", ["0", '"0s"', "-3", '"soon"', "true"])
    def test_a_connect_timeout_that_is_not_a_positive_duration_is_an_error(
        self, in_process: Path, value: str
    ) -> None:
        """A zero, negative or non-duration connect_timeout is an error at its line."""
        path = in_process / "m.toml"
        path.write_text(
            HEAD + f'[[mcp]]\nname = "a"\nurl = "https://h/mcp"\nconnect_timeout = {value}\n'
        )
        message = problems(path)["m.toml:7: mcp[0].connect_timeout"]
        assert message.startswith("must be"), message

    def test_a_broken_table_is_refused_with_its_line(self, in_process: Path) -> None:
        """load_spec names the file, the line and the table."""
        path = in_process / "m.toml"
        path.write_text(HEAD + '[[mcp]]\nname = "a"\n')
        with pytest.raises(ConfigurationError, match=r"m\.toml:4: mcp\[0\]: set command"):
            load_spec(path)


class TestValidate:
    def test_every_mcp_problem_is_named_by_line_and_table(self, in_process: Path) -> None:
        """Unknown keys, no name, both kinds, misplaced keys, a clashing name, a command that
        is not there, a URL that is not http(s), a missing cwd."""
        path = in_process / "m.toml"
        path.write_text(
            HEAD + '[[mcp]]\ncommand = "python3"\n'  # 4: no name
            '[[mcp]]\nname = "both"\ncommand = "python3"\nurl = "http://h/mcp"\n'  # 6
            '[[mcp]]\nname = "hdr"\ncommand = "python3"\nheaders = { A = "b" }\n'  # 10
            '[[mcp]]\nname = "ok"\ncommand = "surely-no-such-command-here"\ncolour = 1\n'  # 14
            '[[mcp]]\nname = "ok"\nurl = "http://h/mcp"\n'  # 18: the name again
            '[[mcp]]\nname = "ftp"\nurl = "ftp://h/mcp"\n'  # 21
            '[[mcp]]\nname = "nodir"\ncommand = "python3"\ncwd = "nowhere"\n'  # 24
            '[[mcp]]\nname = "bad name!"\nurl = "http://h/mcp"\n'  # 28
        )
        found = problems(path)
        assert found["m.toml:4: mcp[0]"].startswith("missing name")
        assert found["m.toml:6: mcp[1]"].startswith("set command")
        assert found["m.toml:13: mcp[2].headers"] == "is not for a server with command"
        assert found["m.toml:17: mcp[3].colour"].startswith("unknown key")
        assert "not an executable on PATH" in found["m.toml:16: mcp[3].command"]
        assert "names another [[mcp]] table" in found["m.toml:19: mcp[4].name"]
        assert "not an http:// or https:// URL" in found["m.toml:23: mcp[5].url"]
        assert "not a directory" in found["m.toml:27: mcp[6].cwd"]
        assert "letters, digits" in found["m.toml:29: mcp[7].name"]

    def test_a_good_table_passes(self, in_process: Path) -> None:
        """A command on PATH and an https URL: no error, and no "no tools" warning."""
        path = in_process / "m.toml"
        path.write_text(
            HEAD + "[budgets]\nmax_turns = 3\n"
            '[[mcp]]\nname = "py"\ncommand = "python3"\n'
            '[[mcp]]\nname = "web"\nurl = "https://mcp.example.org/mcp"\n'
        )
        spec, read = read_spec(path)
        assert spec is not None and [] == read
        assert [] == [
            p for p in validate(path, interactive=False) if "mcp" in p.where or "tools" in p.where
        ]

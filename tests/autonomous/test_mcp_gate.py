"""The permission gate and the names of MCP tools, against real servers (the toolbox, started
twice under two names): a deny rule holds whatever name a tool is offered under (issue 25,
DESIGN item 26), the prompter sees the offered name and the server's, the log records both."""

from __future__ import annotations

from pathlib import Path

import pytest

from autonomous import StopReason, run_autonomous
from autonomous.mcp import MCPServer
from autonomous.testing import ScriptedModel, call, calls, done, reply
from eventlog import EventKind, PermissionDecision
from permissions import Gate, Mode, PermissionRequest

from .helpers import memory_session, payloads
from .mcp_support import Offered, agent, toolbox

pytestmark = [pytest.mark.anyio, pytest.mark.mcp]


def server(tmp_path: Path, name: str) -> MCPServer:
    """The toolbox as server ``name``, counting its starts in a folder of its own."""
    folder = tmp_path / name
    folder.mkdir()
    return toolbox(folder, name=name)


def victims(tmp_path: Path, *names: str) -> list[Path]:
    """A file for each of ``names``, for ``delete_file`` to delete (or not)."""
    files = [tmp_path / f"{name}.txt" for name in names]
    for file in files:
        file.write_text("keep me")
    return files


class TestDenyRulesHoldForEveryName:
    @pytest.mark.parametrize(
        ("deny", "a_answer", "b_answer"),
        [
            (
                "delete_*",
                "denied: denied by deny rule 'delete_*' on its name 'delete_file'",
                "denied: denied by deny rule 'delete_*' on its name 'delete_file'",
            ),
            ("b__*", "deleted {path}", "denied: denied by deny rule 'b__*'"),
        ],
    )
    async def test_a_deny_rule_holds_when_two_servers_declare_the_same_tool(
        self, tmp_path: Path, deny: str, a_answer: str, b_answer: str
    ) -> None:
        """Servers a and b both declare delete_file, offered as a__delete_file and
        b__delete_file: under YOLO, ``delete_*`` denies both calls and ``b__*`` denies b's
        (a's runs: the server works); a denied call never reaches its server (its file is
        still there), the model is told ``denied: ...``, the log records both names."""
        a_file, b_file = victims(tmp_path, "a", "b")
        model = Offered(
            calls(
                [
                    ("a__delete_file", {"path": str(a_file)}),
                    ("b__delete_file", {"path": str(b_file)}),
                ]
            ),
            done(),
            reply("ok"),
        )
        ref = memory_session()
        build = agent(
            ScriptedModel(default=model),
            [server(tmp_path, "a"), server(tmp_path, "b")],
            session=ref,
        )
        gate = Gate(Mode.YOLO, deny=[deny])
        result = await run_autonomous(build, "tidy", max_turns=1, permissions_gate=gate)
        assert StopReason.COMPLETED == result.reason
        assert {"a__delete_file", "b__delete_file"} <= set(model.tools[0])
        assert "delete_file" not in model.tools[0]
        assert [a_answer.format(path=a_file), b_answer] == model.results()[:2]
        a_ran = a_answer.startswith("deleted")
        assert (not a_ran, True) == (a_file.exists(), b_file.exists())
        decisions = await payloads(ref, EventKind.PERMISSION, PermissionDecision)
        assert [
            ("a__delete_file", ("delete_file",), a_ran),
            ("b__delete_file", ("delete_file",), False),
        ] == [(d.tool, d.aliases, d.allowed) for d in decisions]

    async def test_a_server_prefix_rule_holds_for_a_tool_offered_under_its_own_name(
        self, tmp_path: Path
    ) -> None:
        """With server b alone its tool is offered as delete_file; ``b__*`` still denies it."""
        (b_file,) = victims(tmp_path, "b")
        model = Offered(call("delete_file", {"path": str(b_file)}), done(), reply("ok"))
        ref = memory_session()
        build = agent(ScriptedModel(default=model), [server(tmp_path, "b")], session=ref)
        gate = Gate(Mode.YOLO, deny=["b__*"])
        await run_autonomous(build, "tidy", max_turns=1, permissions_gate=gate)
        assert "delete_file" in model.tools[0]
        assert b_file.exists()
        assert [
            "denied: denied by deny rule 'b__*' on its name 'b__delete_file'"
        ] == model.results()[:1]
        (decision,) = await payloads(ref, EventKind.PERMISSION, PermissionDecision)
        assert ("delete_file", ("b__delete_file",), False) == (
            decision.tool,
            decision.aliases,
            decision.allowed,
        )


class TestPromptsAndAllowRules:
    async def test_the_prompter_is_shown_the_offered_name_and_the_servers(
        self, tmp_path: Path
    ) -> None:
        """In ASK mode the request names a__delete_file and its name on the server."""
        asked: list[PermissionRequest] = []

        async def prompter(request: PermissionRequest, /) -> bool:
            asked.append(request)
            return False

        (a_file,) = victims(tmp_path, "a")
        model = Offered(call("a__delete_file", {"path": str(a_file)}), done(), reply("ok"))
        build = agent(ScriptedModel(default=model), [server(tmp_path, "a"), server(tmp_path, "b")])
        await run_autonomous(build, "tidy", max_turns=1, permissions_gate=Gate(Mode.ASK, prompter))
        assert [("a__delete_file", ("delete_file",), True)] == [
            (r.tool, r.aliases, r.destructive) for r in asked
        ]
        assert a_file.exists()

    async def test_allow_mode_allows_a_prefixed_tool_by_its_name_on_the_server(
        self, tmp_path: Path
    ) -> None:
        """``allow=["delete_file"]`` allows a's delete_file though it is offered prefixed
        (the rule names the tool, not the table's choice of name), and the file goes."""
        (a_file,) = victims(tmp_path, "a")
        model = Offered(call("a__delete_file", {"path": str(a_file)}), done(), reply("ok"))
        build = agent(ScriptedModel(default=model), [server(tmp_path, "a"), server(tmp_path, "b")])
        gate = Gate(Mode.ALLOW, allow=["delete_file"])
        await run_autonomous(build, "tidy", max_turns=1, permissions_gate=gate)
        assert [f"deleted {a_file}"] == model.results()[:1]
        assert not a_file.exists()

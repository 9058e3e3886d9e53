"""The permission gate inside runs: modes, rules, prompters, callers from inject_as, the
permission events in the log, and the start-up check of every entry point."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import attrs
import pytest

from autonomous import (
    Agent,
    ConfigurationError,
    GateWouldDeadlock,
    StopReason,
    Tool,
    function_tool,
    resume_autonomous,
    run_autonomous,
    start_autonomous,
)
from autonomous.testing import FakeClock, ScriptedModel, call, calls, done, reply, server
from autonomous.testing._server import ScriptedServer
from eventlog import EventKind, PermissionDecision, SessionRef
from permissions import Caller, Gate, Mode, PermissionRequest, Rule
from permissions import GateWouldDeadlock as PermissionsGateWouldDeadlock

from ..support.litellm_http import API_KEY, MODEL, wait_until
from .helpers import builder, memory_session

pytestmark = pytest.mark.anyio


class Disk:
    """Two tools on a pretend disk, recording which of them actually ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.read = function_tool(self.read_disk, read_only=True)
        self.wipe = function_tool(self.wipe_disk)

    async def read_disk(self, path: str) -> str:
        """Report the usage of path."""
        self.ran.append(f"read {path}")
        return f"{path}: 42% used"

    async def wipe_disk(self, path: str) -> str:
        """Erase everything under path."""
        self.ran.append(f"wipe {path}")
        return f"{path}: wiped"

    @property
    def tools(self) -> list[Tool]:
        """Both tools."""
        return [self.read, self.wipe]


def tool_contents(messages: Sequence[Any]) -> list[str]:
    """The text of every tool result the model was sent, in order."""
    return [m["content"] for m in messages if m["role"] == "tool"]


def read_then_wipe() -> list[Any]:
    """A script: read /data, wipe /data, then finish."""
    return [
        calls([("read_disk", {"path": "/data"}), ("wipe_disk", {"path": "/data"})]),
        done(),
        reply("ok"),
    ]


async def permission_events(ref: SessionRef) -> list[PermissionDecision]:
    """Every permission decision recorded in ``ref``'s session, in order."""
    events = await ref.log.read(ref.key, kinds=[EventKind.PERMISSION])
    return [e.payload for e in events if isinstance(e.payload, PermissionDecision)]


class Prompter:
    """An async prompter with a fixed answer that records every request it gets."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.requests: list[PermissionRequest] = []

    async def __call__(self, request: PermissionRequest, /) -> bool:
        self.requests.append(request)
        if self.answer is None:
            await anyio.sleep_forever()
        return bool(self.answer)


# --------------------------------------------------------------------------- modes


class TestAllowMode:
    async def test_a_deny_rule_answers_the_model_and_the_run_goes_on(self) -> None:
        """In ALLOW mode a deny rule stops that call (answered 'denied: ...'); others run."""
        disk, ref = Disk(), memory_session()
        model = ScriptedModel(read_then_wipe())
        result = await run_autonomous(
            builder(model, tools=disk.tools, session=ref),
            "tidy",
            permissions_gate=Gate(Mode.ALLOW, allow=["*_disk"], deny=["wipe_*"]),
        )
        assert StopReason.COMPLETED == result.reason
        assert ["read /data"] == disk.ran
        assert [
            "/data: 42% used",
            "denied: denied by deny rule 'wipe_*'",
        ] == tool_contents(model.last_messages)[:2]
        assert [("read_disk", True), ("wipe_disk", False)] == [
            (p.tool, p.allowed) for p in await permission_events(ref)
        ]

    async def test_a_tool_no_allow_rule_names_is_denied(self) -> None:
        """ALLOW runs only allowlisted tools: an unlisted one never runs, and the model is told."""
        disk, ref = Disk(), memory_session()
        model = ScriptedModel(read_then_wipe())
        result = await run_autonomous(
            builder(model, tools=disk.tools, session=ref),
            "tidy",
            permissions_gate=Gate(Mode.ALLOW, allow=["read_disk"]),
        )
        assert (StopReason.COMPLETED, ["read /data"]) == (result.reason, disk.ran)
        assert [
            "/data: 42% used",
            "denied: allow mode: tool 'wipe_disk' is not in the allow list",
        ] == tool_contents(model.last_messages)[:2]
        assert [("read_disk", True), ("wipe_disk", False)] == [
            (p.tool, p.allowed) for p in await permission_events(ref)
        ]

    async def test_the_control_tools_are_never_gated(self) -> None:
        """A deny-everything rule still lets the done tool end the run."""
        model = ScriptedModel([done("finished"), reply("ok")])
        result = await run_autonomous(
            builder(model), "go", permissions_gate=Gate(Mode.ALLOW, deny=["*"])
        )
        assert (StopReason.COMPLETED, "finished") == (result.reason, result.done_detail)

    async def test_a_denial_over_http(self, scripted_server: ScriptedServer) -> None:
        """Through litellm, the denial is the tool message the server receives next."""
        disk = Disk()
        scripted_server.push(
            server.call("wipe_disk", {"path": "/"}),
            server.call("report_done", {"state": "done"}),
            server.reply("ok"),
        )

        def build(extra: list[Tool]) -> Agent:
            return Agent(
                MODEL,
                tools=[*disk.tools, *extra],
                api_base=scripted_server.api_base,
                api_key=API_KEY,
            )

        result = await run_autonomous(
            build, "tidy", permissions_gate=Gate(Mode.ALLOW, deny=["wipe_*"]), max_turns=2
        )
        sent = scripted_server.requests[1]["messages"][-1]
        assert ("tool", "denied: denied by deny rule 'wipe_*'") == (sent["role"], sent["content"])
        assert (StopReason.COMPLETED, []) == (result.reason, disk.ran)


class TestYoloMode:
    async def test_allows_everything_but_explicit_deny_rules(self) -> None:
        """YOLO runs every tool without asking, except what a deny rule names."""
        disk = Disk()
        model = ScriptedModel(read_then_wipe())
        await run_autonomous(
            builder(model, tools=disk.tools), "tidy", permissions_gate=Gate(Mode.YOLO)
        )
        assert ["read /data", "wipe /data"] == disk.ran
        disk, model = Disk(), ScriptedModel(read_then_wipe())
        await run_autonomous(
            builder(model, tools=disk.tools),
            "tidy",
            permissions_gate=Gate(Mode.YOLO, deny=["wipe_disk"]),
        )
        assert ["read /data"] == disk.ran


class TestToolNames:
    async def test_a_deny_rule_on_an_alias_holds_and_the_log_records_both_names(self) -> None:
        """A tool's aliases reach the gate: a deny rule that names only an alias denies the
        call, and the permission event records the name called and the aliases."""
        disk, ref = Disk(), memory_session()
        wipe = attrs.evolve(disk.wipe, aliases=("erase_disk", "wipe_disk"))
        model = ScriptedModel(read_then_wipe())
        await run_autonomous(
            builder(model, tools=[disk.read, wipe], session=ref),
            "tidy",
            permissions_gate=Gate(Mode.YOLO, deny=["erase_*"]),
        )
        assert ["read /data"] == disk.ran
        assert (
            "denied: denied by deny rule 'erase_*' on its name 'erase_disk'"
            == (tool_contents(model.last_messages)[1])
        )
        assert [("read_disk", (), True), ("wipe_disk", ("erase_disk",), False)] == [
            (p.tool, p.aliases, p.allowed) for p in await permission_events(ref)
        ]

    def test_a_tool_knows_its_names(self) -> None:
        """``names`` is the name then each alias once; an alias equal to the name is dropped."""
        tool = attrs.evolve(Disk().wipe, aliases=("erase_disk", "wipe_disk", "erase_disk"))
        assert (("erase_disk",), ("wipe_disk", "erase_disk")) == (tool.aliases, tool.names)

    @pytest.mark.parametrize("aliases", ["erase_disk", [""], [3]])
    def test_aliases_that_are_no_names_are_refused(self, aliases: Any) -> None:
        """A string (not a list of names), an empty or a non-string alias: a clear error."""
        with pytest.raises(ConfigurationError, match="alias"):
            attrs.evolve(Disk().wipe, aliases=aliases)


class TestPlanMode:
    async def test_only_read_only_tools_run(self) -> None:
        """PLAN runs tools made with read_only=True and denies the rest to the model."""
        disk, ref = Disk(), memory_session()
        model = ScriptedModel(read_then_wipe())
        result = await run_autonomous(
            builder(model, tools=disk.tools, session=ref),
            "plan",
            permissions_gate=Gate(Mode.PLAN, allow=["wipe_*"]),
        )
        assert StopReason.COMPLETED == result.reason
        assert ["read /data"] == disk.ran
        assert [
            "/data: 42% used",
            "denied: plan mode: tool is not read-only",
        ] == tool_contents(model.last_messages)[:2]
        assert ["plan", "plan"] == [p.mode for p in await permission_events(ref)]


class TestAskMode:
    async def test_a_prompter_that_allows_lets_the_tool_run(self) -> None:
        """ASK asks the prompter (tool, arguments, read-only flag); True runs the call."""
        disk, prompter = Disk(), Prompter(True)
        model = ScriptedModel([call("wipe_disk", {"path": "/tmp"}), done(), reply("ok")])
        await run_autonomous(
            builder(model, tools=disk.tools), "tidy", permissions_gate=Gate(prompter=prompter)
        )
        assert ["wipe /tmp"] == disk.ran
        request = prompter.requests[0]
        assert ("wipe_disk", {"path": "/tmp"}, None, False) == (
            request.tool,
            dict(request.arguments),
            request.caller,
            request.read_only,
        )

    async def test_a_prompter_that_denies_is_answered_to_the_model(self) -> None:
        """A 'no' from the prompter is a denial the model reads; the run goes on."""
        disk, ref = Disk(), memory_session()
        model = ScriptedModel([call("wipe_disk", {"path": "/tmp"}), done(), reply("ok")])
        result = await run_autonomous(
            builder(model, tools=disk.tools, session=ref),
            "tidy",
            permissions_gate=Gate(prompter=Prompter(False)),
        )
        assert (StopReason.COMPLETED, []) == (result.reason, disk.ran)
        assert "denied: denied by prompter" == tool_contents(model.last_messages)[0]
        (decision,) = await permission_events(ref)
        assert ("wipe_disk", False, "denied by prompter", "ask") == (
            decision.tool,
            decision.allowed,
            decision.reason,
            decision.mode,
        )

    async def test_a_prompter_timeout_is_a_denial(self) -> None:
        """A prompter that does not answer within prompt_timeout, on the run's clock, denies
        the call; until then the call waits for it."""
        disk, ref, clock, prompter = Disk(), memory_session(), FakeClock(), Prompter(None)
        model = ScriptedModel([call("wipe_disk", {"path": "/tmp"}), done(), reply("ok")])
        # A gate on real time would wait out its 30 s instead.
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model, tools=disk.tools, session=ref),
                "tidy",
                permissions_gate=Gate(prompter=prompter, prompt_timeout=30),
                clock=clock,
            ) as h:
                await wait_until(lambda: bool(prompter.requests))
                clock.advance(29)
                await anyio.wait_all_tasks_blocked()
                assert (1, []) == (model.requests, await permission_events(ref))
                clock.advance(1)
                result = await h.wait()
        assert (StopReason.COMPLETED, []) == (result.reason, disk.ran)
        assert [False] == [p.allowed for p in await permission_events(ref)]
        assert "denied: prompter timed out after 30 s" == (tool_contents(model.last_messages)[0])

    async def test_allow_rules_skip_the_prompter(self) -> None:
        """A call an allow rule covers runs without a prompt."""
        disk, prompter = Disk(), Prompter(False)
        model = ScriptedModel(read_then_wipe())
        await run_autonomous(
            builder(model, tools=disk.tools),
            "tidy",
            permissions_gate=Gate(prompter=prompter, allow=["read_*"]),
        )
        assert ["read /data"] == disk.ran
        assert ["wipe_disk"] == [r.tool for r in prompter.requests]


# --------------------------------------------------------------------------- callers


class TestCallers:
    async def test_an_admin_only_rule_follows_the_turns_originator(self) -> None:
        """The turn delivering alice's (admin) message may restart; turns without an admin
        caller may not, and every decision names who asked."""
        restarted: list[int] = []

        async def restart_service(name: str) -> str:
            """Restart the named service."""
            restarted.append(len(restarted) + 1)
            return f"{name} restarted"

        boundary = {2: anyio.Event(), 3: anyio.Event()}
        go = {2: anyio.Event(), 3: anyio.Event()}

        async def before_turn(turn: int) -> None:
            if turn in boundary:
                boundary[turn].set()
                await go[turn].wait()

        prompter, ref = Prompter(False), memory_session()
        restart = call("restart_service", {"name": "nginx"})
        model = ScriptedModel(
            [restart, reply("t1"), restart, reply("t2"), restart, reply("t3"), restart, done()],
            default=reply("bye"),
        )
        gate = Gate(Mode.ASK, prompter=prompter, allow=[Rule("restart_*", admin_only=True)])
        tools = [function_tool(restart_service)]
        async with start_autonomous(
            builder(model, tools=tools, session=ref),
            "keep nginx up",
            permissions_gate=gate,
            before_turn=before_turn,
        ) as h:
            await boundary[2].wait()
            await h.inject_as("restart nginx now", Caller(identity="alice", admin=True))
            go[2].set()
            await boundary[3].wait()
            await h.inject_as("restart it again", Caller(identity="bob", labels={"team": "ops"}))
            go[3].set()
            result = await h.wait()
        assert StopReason.COMPLETED == result.reason
        assert [1] == restarted
        decisions = [
            (
                p.turn,
                p.tool,
                p.allowed,
                p.reason,
                None if p.caller is None else (p.caller.identity, p.caller.admin),
            )
            for p in await permission_events(ref)
        ]
        assert [
            (1, "restart_service", False, "denied by prompter", None),
            (
                2,
                "restart_service",
                True,
                "allowed by allow rule 'restart_*'; admin only",
                ("alice", True),
            ),
            (3, "restart_service", False, "denied by prompter", ("bob", False)),
            (4, "restart_service", False, "denied by prompter", None),
        ] == decisions
        assert [None, Caller("bob", {"team": "ops"}), None] == [r.caller for r in prompter.requests]

    async def test_a_label_rule_allows_only_callers_with_that_label(self) -> None:
        """Rule(labels=...) allows the turn of a caller with that label without a prompt."""
        disk, prompter = Disk(), Prompter(False)
        started = anyio.Event()

        async def before_turn(turn: int) -> None:
            if turn == 1:
                await started.wait()

        model = ScriptedModel([call("wipe_disk", {"path": "/tmp"}), done(), reply("ok")])
        gate = Gate(prompter=prompter, allow=[Rule("wipe_*", labels={"team": "ops"})])
        async with start_autonomous(
            builder(model, tools=disk.tools), "tidy", permissions_gate=gate, before_turn=before_turn
        ) as h:
            await h.ready()
            await h.inject_as("clean tmp", Caller(identity="carol", labels={"team": "ops"}))
            started.set()
            await h.wait()
        assert (["wipe /tmp"], []) == (disk.ran, prompter.requests)


# --------------------------------------------------------------------------- start-up


class TestStartupCheck:
    def ask_without_prompter(self) -> Gate:
        """A gate that would prompt with nobody to answer."""
        return Gate(Mode.ASK)

    async def test_run_autonomous_fails_before_build(self) -> None:
        """run_autonomous refuses an ASK gate without a prompter before building anything."""
        built: list[object] = []
        model = ScriptedModel([done(), reply("ok")])

        def build(extra: list[Tool]) -> Agent:
            built.append(extra)
            return builder(model)(extra)

        with pytest.raises(GateWouldDeadlock, match="no prompter is set"):
            await run_autonomous(build, "go", permissions_gate=self.ask_without_prompter())
        assert ([], 0) == (built, model.requests)

    async def test_start_autonomous_fails_at_the_call(self) -> None:
        """start_autonomous raises at once, before the block is entered."""
        built: list[object] = []

        def build(extra: list[Tool]) -> Agent:
            built.append(extra)
            return builder(ScriptedModel([done()]))(extra)

        with pytest.raises(PermissionsGateWouldDeadlock):
            start_autonomous(build, "go", permissions_gate=self.ask_without_prompter())
        assert [] == built

    async def test_resume_autonomous_fails_before_touching_the_session(self) -> None:
        """resume_autonomous refuses it before the build and before reading the session."""
        ref = memory_session()
        first = await run_autonomous(
            builder(ScriptedModel([reply("a")]), session=ref), "go", max_turns=1
        )
        assert StopReason.MAX_TURNS_EXCEEDED == first.reason
        before = len(await ref.log.read(ref.key))
        built: list[object] = []

        def rebuild(extra: list[Tool], session_id: str) -> Agent:
            built.append(session_id)
            return builder(ScriptedModel([done()]), session=ref)(extra)

        with pytest.raises(GateWouldDeadlock):
            await resume_autonomous(rebuild, ref, permissions_gate=self.ask_without_prompter())
        assert ([], before) == (built, len(await ref.log.read(ref.key)))

    @pytest.mark.parametrize("mode", [Mode.ALLOW, Mode.YOLO, Mode.PLAN])
    async def test_modes_that_never_prompt_need_no_prompter(self, mode: Mode) -> None:
        """ALLOW, YOLO and PLAN start without a prompter."""
        result = await run_autonomous(
            builder(ScriptedModel([done(), reply("ok")])), "go", permissions_gate=Gate(mode)
        )
        assert StopReason.COMPLETED == result.reason

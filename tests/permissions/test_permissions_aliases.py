"""Rules against every name a tool is known by (``aliases``): an MCP server's tool is offered
as ``a__delete_file`` when another server has a ``delete_file`` too, and a rule written for
either name must hold (DESIGN item 26)."""

from __future__ import annotations

import io

import pytest

from permissions import Caller, Gate, Mode, PermissionRequest, Rule, TerminalPrompter

from .permissions_helpers import RecordingPrompter

pytestmark = pytest.mark.anyio

ARGS = {"path": "/tmp/x"}
#: Server a's ``delete_file``, offered prefixed because server b has one too.
OFFERED, ALIASES = "a__delete_file", ("delete_file",)


class TestDenyRulesAndAliases:
    """A deny rule that matches any of a tool's names denies it, in every mode."""

    @pytest.mark.parametrize("mode", list(Mode))
    async def test_a_deny_rule_matching_only_the_servers_name_denies(
        self, mode: Mode, yes: RecordingPrompter
    ) -> None:
        """``delete_*`` denies ``a__delete_file``, known as ``delete_file``, without a prompt."""
        gate = Gate(mode, yes, allow=["*"], deny=["delete_*"])
        decision = await gate.check(OFFERED, ARGS, aliases=ALIASES, read_only=True)
        assert (False, False) == (decision.allowed, decision.prompted)
        assert "denied by deny rule 'delete_*' on its name 'delete_file'" == decision.reason
        assert [] == yes.requests

    async def test_a_server_prefix_rule_denies_a_tool_offered_under_its_own_name(self) -> None:
        """``b__*`` denies b's ``delete_file`` when it is offered unprefixed (no clash)."""
        gate = Gate(Mode.YOLO, deny=["b__*"])
        decision = await gate.check("delete_file", ARGS, aliases=("b__delete_file",))
        assert (False, "denied by deny rule 'b__*' on its name 'b__delete_file'") == (
            decision.allowed,
            decision.reason,
        )

    async def test_a_rule_on_the_offered_name_reads_as_before(self) -> None:
        """A deny rule that matches the offered name says so as it always did."""
        gate = Gate(Mode.YOLO, deny=["a__*"])
        decision = await gate.check(OFFERED, ARGS, aliases=ALIASES)
        assert (False, "denied by deny rule 'a__*'") == (decision.allowed, decision.reason)

    async def test_deny_on_one_name_wins_over_allow_on_another(self) -> None:
        """An allow rule for ``a__*`` does not save a tool a deny rule names otherwise."""
        gate = Gate(Mode.ALLOW, allow=["a__*"], deny=["delete_file"])
        assert not (await gate.check(OFFERED, ARGS, aliases=ALIASES)).allowed

    async def test_caller_conditions_hold_for_every_name(self) -> None:
        """A deny rule with a caller condition denies by an alias only for that caller."""
        gate = Gate(Mode.YOLO, deny=[Rule("delete_*", labels={"team": "dev"})])
        dev, ops = Caller(labels={"team": "dev"}), Caller(labels={"team": "ops"})
        assert (False, True) == (
            (await gate.check(OFFERED, ARGS, aliases=ALIASES, caller=dev)).allowed,
            (await gate.check(OFFERED, ARGS, aliases=ALIASES, caller=ops)).allowed,
        )

    async def test_a_string_of_aliases_is_refused(self) -> None:
        """``aliases="delete_file"`` is a mistake (its letters are no names): a TypeError."""
        with pytest.raises(TypeError, match="aliases"):
            await Gate(Mode.YOLO).check(OFFERED, ARGS, aliases="delete_file")

    @pytest.mark.parametrize("alias", ["", 3])
    async def test_an_alias_that_is_no_name_is_refused(self, alias: object) -> None:
        """An empty or non-string alias is a ValueError or TypeError, never skipped."""
        with pytest.raises((TypeError, ValueError), match="alias"):
            await Gate(Mode.YOLO).check(OFFERED, ARGS, aliases=[alias])  # type: ignore[list-item]


class TestAllowRulesAndAliases:
    """An allow rule that matches any of a tool's names allows it (deny rules first)."""

    async def test_allow_mode_allows_by_the_servers_name(self, no: RecordingPrompter) -> None:
        """``allow=["delete_file"]`` still allows server a's tool once it is prefixed."""
        gate = Gate(Mode.ALLOW, no, allow=["delete_file"])
        decision = await gate.check(OFFERED, ARGS, aliases=ALIASES)
        assert (True, "allowed by allow rule 'delete_file' on its name 'delete_file'") == (
            decision.allowed,
            decision.reason,
        )
        assert [] == no.requests

    async def test_allow_mode_allows_by_a_server_prefix(self) -> None:
        """``allow=["a__*"]`` allows a's tools also while they are offered unprefixed."""
        gate = Gate(Mode.ALLOW, allow=["a__*"])
        assert (await gate.check("delete_file", ARGS, aliases=("a__delete_file",))).allowed

    async def test_a_refusal_names_every_name_the_rules_were_tried_on(self) -> None:
        """ALLOW's refusal lists the aliases, so the operator sees what a rule could name."""
        decision = await Gate(Mode.ALLOW, allow=["read_*"]).check(OFFERED, ARGS, aliases=ALIASES)
        assert (
            False,
            "allow mode: tool 'a__delete_file' (also known as 'delete_file') is not in the "
            "allow list",
        ) == (decision.allowed, decision.reason)

    async def test_ask_mode_skips_the_prompter_for_an_allow_rule_on_an_alias(
        self, no: RecordingPrompter
    ) -> None:
        """In ASK mode an allow rule on the server's name answers without a prompt."""
        decision = await Gate(Mode.ASK, no, allow=["delete_*"]).check(
            OFFERED, ARGS, aliases=ALIASES
        )
        assert (True, False, []) == (decision.allowed, decision.prompted, no.requests)

    async def test_allow_rules_on_aliases_do_not_widen_plan_mode(self) -> None:
        """PLAN runs read-only tools only, whatever name an allow rule matches."""
        gate = Gate(Mode.PLAN, allow=["*"])
        assert (False, True) == (
            (await gate.check(OFFERED, ARGS, aliases=ALIASES)).allowed,
            (await gate.check(OFFERED, ARGS, aliases=ALIASES, read_only=True)).allowed,
        )

    @pytest.mark.parametrize("mode", [Mode.ALLOW, Mode.YOLO, Mode.PLAN])
    @pytest.mark.parametrize(
        ("allow", "deny"),
        [
            ((), ("delete_*",)),
            ((), ("a__*",)),
            (("delete_file",), ()),
            (("a__*",), ()),
            (("a__*",), ("delete_*",)),
            (("delete_*",), ("a__*",)),
            (("*",), ("b__*",)),
            (("read_*",), ("write_*",)),
        ],
    )
    @pytest.mark.parametrize("read_only", [False, True])
    async def test_the_name_offered_never_changes_the_decision(
        self, mode: Mode, allow: tuple[str, ...], deny: tuple[str, ...], read_only: bool
    ) -> None:
        """A tool known as {delete_file, a__delete_file} is decided alike whichever of the two
        it is offered under: adding or removing a server never widens (or narrows) a rule."""
        gate = Gate(mode, allow=allow, deny=deny)
        alone = await gate.check(
            "delete_file", ARGS, aliases=("a__delete_file",), read_only=read_only
        )
        clashed = await gate.check(OFFERED, ARGS, aliases=ALIASES, read_only=read_only)
        assert alone.allowed == clashed.allowed


class TestPromptsAndAliases:
    """A prompter is shown the offered name and the others."""

    async def test_the_request_carries_the_offered_name_and_the_aliases(
        self, yes: RecordingPrompter
    ) -> None:
        """The request's ``tool`` is the offered name; ``aliases`` the others; ``names`` all."""
        await Gate(Mode.ASK, yes).check(OFFERED, ARGS, aliases=("delete_file", OFFERED))
        (request,) = yes.requests
        assert (OFFERED, ("delete_file",), (OFFERED, "delete_file")) == (
            request.tool,
            request.aliases,
            request.names,
        )

    async def test_the_terminal_shows_the_aliases(self) -> None:
        """The terminal's question names the tool and then every other name, escaped."""
        out = io.StringIO()
        request = PermissionRequest(OFFERED, {}, None, False, aliases=("delete_file", "x\x1b[2J"))
        await TerminalPrompter(io.StringIO("n\n"), out)(request)
        assert "tool a__delete_file\n  also known as: delete_file, x\\x1b[2J\n" in out.getvalue()

    async def test_without_aliases_the_question_is_as_before(self) -> None:
        """A tool with one name gets no 'also known as' line."""
        out = io.StringIO()
        await TerminalPrompter(io.StringIO("n\n"), out)(PermissionRequest("t", {}, None, False))
        assert "also known as" not in out.getvalue()

"""Gate decisions by mode and rules, without prompting."""

from __future__ import annotations

import pytest

from permissions import Caller, Decision, Gate, Mode, Rule

from .permissions_helpers import RecordingPrompter

pytestmark = pytest.mark.anyio

ARGS = {"path": "/tmp/x"}


class TestDenyRules:
    """Deny rules deny in every mode and win over allow rules."""

    @pytest.mark.parametrize("mode", list(Mode))
    async def test_deny_rule_denies_in_every_mode(self, mode: Mode, yes: RecordingPrompter) -> None:
        """A matching deny rule denies, whatever the mode, without prompting."""
        gate = Gate(mode, yes, deny=["rm_*"], allow=["*"])
        decision = await gate.check("rm_rf", ARGS, read_only=True)
        assert (False, mode, False) == (decision.allowed, decision.mode, decision.prompted)
        assert "deny rule 'rm_*'" in decision.reason
        assert [] == yes.requests

    @pytest.mark.parametrize("mode", list(Mode))
    async def test_non_matching_deny_rule_is_ignored(self, mode: Mode) -> None:
        """A deny rule for another tool does not deny."""
        gate = Gate(mode, deny=["rm_*"], allow=["read"])
        assert (await gate.check("read", ARGS, read_only=True)).allowed


class TestYoloMode:
    """YOLO allows everything that no deny rule covers."""

    async def test_allows_without_rules(self, no: RecordingPrompter) -> None:
        """A write tool is allowed without asking the prompter."""
        decision = await Gate(Mode.YOLO, no).check("write", ARGS)
        assert Decision(True, "yolo mode: allowed without asking", Mode.YOLO, False) == decision
        assert [] == no.requests

    async def test_allow_rules_do_not_matter(self) -> None:
        """Allow rules neither add nor take away anything in YOLO mode."""
        gate = Gate(Mode.YOLO, allow=["read"])
        assert (await gate.check("write", ARGS)).allowed


class TestAllowMode:
    """ALLOW runs only what an allow rule matches (as in Go); deny rules still win."""

    async def test_an_allowlisted_tool_runs_without_prompting(self, no: RecordingPrompter) -> None:
        """A tool an allow rule matches is allowed and the prompter is not asked."""
        decision = await Gate(Mode.ALLOW, no, allow=["read_*"]).check("read_file", ARGS)
        assert Decision(True, "allowed by allow rule 'read_*'", Mode.ALLOW, False) == decision
        assert [] == no.requests

    async def test_an_unlisted_tool_is_denied(self, yes: RecordingPrompter) -> None:
        """A tool no allow rule matches is denied, saying so, and the prompter is not asked."""
        decision = await Gate(Mode.ALLOW, yes, allow=["read_*"]).check("write", ARGS)
        expected = "allow mode: tool 'write' is not in the allow list"
        assert Decision(False, expected, Mode.ALLOW, False) == decision
        assert [] == yes.requests

    async def test_no_allow_rules_deny_everything(self) -> None:
        """With an empty allow list nothing runs, read-only or not."""
        gate = Gate(Mode.ALLOW)
        assert (False, False) == (
            (await gate.check("anything", ARGS)).allowed,
            (await gate.check("read", ARGS, read_only=True)).allowed,
        )

    async def test_allow_rule_caller_condition(self) -> None:
        """An allow rule limited to admins allows them only."""
        gate = Gate(Mode.ALLOW, allow=[Rule("deploy", admin_only=True)])
        admin = Caller(identity="a", admin=True)
        assert (True, False, False) == (
            (await gate.check("deploy", ARGS, caller=admin)).allowed,
            (await gate.check("deploy", ARGS, caller=Caller(identity="u"))).allowed,
            (await gate.check("deploy", ARGS)).allowed,
        )

    async def test_deny_by_caller_condition(self) -> None:
        """A deny rule limited to some callers denies only them."""
        gate = Gate(Mode.ALLOW, allow=["deploy"], deny=[Rule("deploy", labels={"team": "interns"})])
        intern = Caller(identity="i", labels={"team": "interns"})
        ops = Caller(identity="o", labels={"team": "ops"})
        assert (False, True, True) == (
            (await gate.check("deploy", ARGS, caller=intern)).allowed,
            (await gate.check("deploy", ARGS, caller=ops)).allowed,
            (await gate.check("deploy", ARGS)).allowed,
        )


class TestPlanMode:
    """PLAN allows read-only tools only."""

    async def test_read_only_is_allowed(self) -> None:
        """A read-only tool is allowed."""
        decision = await Gate(Mode.PLAN).check("read", ARGS, read_only=True)
        assert Decision(True, "plan mode: tool is read-only", Mode.PLAN, False) == decision

    async def test_other_tools_are_denied(self, yes: RecordingPrompter) -> None:
        """A tool not marked read-only is denied with the plan-mode reason, without prompting."""
        decision = await Gate(Mode.PLAN, yes).check("write", ARGS)
        assert Decision(False, "plan mode: tool is not read-only", Mode.PLAN, False) == decision
        assert [] == yes.requests

    async def test_allow_rules_do_not_widen_plan_mode(self) -> None:
        """An allow rule does not let a write tool through in PLAN mode."""
        gate = Gate(Mode.PLAN, allow=["*"])
        assert not (await gate.check("write", ARGS)).allowed


class TestAskModeRules:
    """ASK allows what allow rules cover and prompts for the rest."""

    async def test_allow_rule_allows_without_prompting(self, no: RecordingPrompter) -> None:
        """A matching allow rule allows, and the prompter is not asked."""
        decision = await Gate(Mode.ASK, no, allow=["read_*"]).check("read_file", ARGS)
        assert (True, False) == (decision.allowed, decision.prompted)
        assert "allow rule 'read_*'" in decision.reason
        assert [] == no.requests

    async def test_uncovered_call_is_prompted(self, yes: RecordingPrompter) -> None:
        """A call no rule covers goes to the prompter."""
        decision = await Gate(Mode.ASK, yes, allow=["read_*"]).check("write", ARGS)
        assert Decision(True, "allowed by prompter", Mode.ASK, True) == decision
        assert ["write"] == [request.tool for request in yes.requests]

    async def test_admin_only_rule(self, no: RecordingPrompter) -> None:
        """An admin-only allow rule allows admins and prompts everyone else."""
        gate = Gate(Mode.ASK, no, allow=[Rule("deploy", admin_only=True)])
        admin = Caller(identity="root", admin=True)
        user = Caller(identity="bob")
        assert (True, False, False) == (
            (await gate.check("deploy", ARGS, caller=admin)).allowed,
            (await gate.check("deploy", ARGS, caller=user)).allowed,
            (await gate.check("deploy", ARGS)).allowed,
        )
        assert 2 == len(no.requests)

    async def test_label_rule(self, no: RecordingPrompter) -> None:
        """A label rule allows callers that carry every listed label."""
        gate = Gate(Mode.ASK, no, allow=[Rule("restart", labels={"team": "ops", "tier": "1"})])
        both = Caller(labels={"team": "ops", "tier": "1", "x": "y"})
        one = Caller(labels={"team": "ops"})
        assert (True, False) == (
            (await gate.check("restart", ARGS, caller=both)).allowed,
            (await gate.check("restart", ARGS, caller=one)).allowed,
        )

    async def test_identity_rule(self, no: RecordingPrompter) -> None:
        """An identity rule allows only the listed identities."""
        gate = Gate(Mode.ASK, no, allow=[Rule("*", identities=("alice", "carol"))])
        assert (True, False) == (
            (await gate.check("x", ARGS, caller=Caller(identity="carol"))).allowed,
            (await gate.check("x", ARGS, caller=Caller(identity="bob"))).allowed,
        )

    async def test_no_prompter_denies_instead_of_hanging(self) -> None:
        """Without a prompter an uncovered call is denied at once (startup_check catches this)."""
        decision = await Gate(Mode.ASK).check("write", ARGS)
        assert (False, False) == (decision.allowed, decision.prompted)
        assert "no prompter" in decision.reason

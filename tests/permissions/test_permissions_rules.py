"""Rule matching and the Caller value."""

from __future__ import annotations

import attrs
import pytest

from permissions import Caller, Gate, Mode, Rule


class TestCaller:
    """Caller: a frozen, hashable description of who asked."""

    def test_defaults(self) -> None:
        """A default caller is anonymous, unlabelled and not an admin."""
        assert ("", {}, False) == (Caller().identity, Caller().labels, Caller().admin)

    def test_keyword_construction(self) -> None:
        """The documented keywords build a caller."""
        caller = Caller(identity="x", labels={"team": "ops"}, admin=True)
        assert ("x", {"team": "ops"}, True) == (caller.identity, caller.labels, caller.admin)

    def test_labels_are_a_frozen_copy(self) -> None:
        """Changing the dict passed in does not change the caller."""
        labels = {"team": "ops"}
        caller = Caller(labels=labels)
        labels["team"] = "dev"
        assert {"team": "ops"} == caller.labels
        with pytest.raises(TypeError):
            caller.labels["team"] = "dev"  # type: ignore[index]

    def test_hashable_and_equal_by_value(self) -> None:
        """Equal callers hash alike and can be set members."""
        a = Caller(identity="x", labels={"a": "1", "b": "2"})
        b = Caller(identity="x", labels={"b": "2", "a": "1"})
        assert a == b
        assert 1 == len({a, b})

    def test_is_frozen(self) -> None:
        """A caller cannot be changed."""
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            Caller().admin = True  # type: ignore[misc]

    def test_labels_must_be_strings(self) -> None:
        """A non-string label is a TypeError."""
        with pytest.raises(TypeError, match="str"):
            Caller(labels={"tier": 1})  # type: ignore[dict-item]


class TestRule:
    """Rule.matches: a glob on the tool name plus caller conditions."""

    @pytest.mark.parametrize(
        ("pattern", "tool", "expected"),
        [
            ("read_file", "read_file", True),
            ("read_*", "read_file", True),
            ("read_?ile", "read_file", True),
            ("read_*", "write_file", False),
            ("*", "anything", True),
            ("Read_*", "read_file", False),
        ],
    )
    def test_glob(self, pattern: str, tool: str, expected: bool) -> None:
        """The tool glob is an fnmatch pattern, case-sensitive."""
        assert expected == Rule(pattern).matches(tool, None)

    def test_plain_rule_matches_any_caller(self) -> None:
        """A rule without caller conditions matches with or without a caller."""
        assert (True, True) == (
            Rule("t").matches("t", None),
            Rule("t").matches("t", Caller(identity="x")),
        )

    @pytest.mark.parametrize(
        "rule",
        [Rule("t", admin_only=True), Rule("t", labels={"a": "b"}), Rule("t", identities=("x",))],
    )
    def test_conditional_rule_needs_a_caller(self, rule: Rule) -> None:
        """A rule with a caller condition never matches a call without a caller."""
        assert not rule.matches("t", None)

    def test_conditions_all_hold(self) -> None:
        """All conditions of a rule must hold together."""
        rule = Rule("t", admin_only=True, labels={"team": "ops"}, identities=("root",))
        assert (True, False, False, False) == (
            rule.matches("t", Caller("root", {"team": "ops"}, admin=True)),
            rule.matches("t", Caller("root", {"team": "ops"}, admin=False)),
            rule.matches("t", Caller("root", {"team": "dev"}, admin=True)),
            rule.matches("t", Caller("bob", {"team": "ops"}, admin=True)),
        )

    def test_blank_glob_is_rejected(self) -> None:
        """An empty tool glob is a ValueError."""
        with pytest.raises(ValueError, match="non-empty glob"):
            Rule("")

    def test_identities_string_is_rejected(self) -> None:
        """A bare string for identities is a TypeError, not a tuple of letters."""
        with pytest.raises(TypeError, match="identities"):
            Rule("t", identities="alice")

    def test_rules_are_hashable(self) -> None:
        """Rules with labels are frozen values that hash."""
        assert hash(Rule("t", labels={"a": "b"})) == hash(Rule("t", labels={"a": "b"}))


class TestGateConstruction:
    """Gate's options and their validation."""

    def test_strings_are_rule_shorthand(self) -> None:
        """A glob string in allow or deny is Rule(tool=glob)."""
        gate = Gate(allow=["a", Rule("b")], deny=("c",))
        assert ((Rule("a"), Rule("b")), (Rule("c"),)) == (gate.allow, gate.deny)

    def test_defaults(self) -> None:
        """A default gate asks, has no prompter, no rules and a 60 s prompt timeout."""
        gate = Gate()
        assert (Mode.ASK, None, (), (), 60.0) == (
            gate.mode,
            gate.prompter,
            gate.allow,
            gate.deny,
            gate.prompt_timeout,
        )

    def test_mode_from_string(self) -> None:
        """A mode may be given by its value."""
        assert Mode.YOLO == Gate("yolo").mode

    @pytest.mark.parametrize("bad", [0, -1, float("nan")])
    def test_prompt_timeout_must_be_positive(self, bad: float) -> None:
        """A zero, negative or NaN prompt timeout is a ValueError."""
        with pytest.raises(ValueError, match="prompt_timeout"):
            Gate(prompt_timeout=bad)

    def test_rules_string_is_rejected(self) -> None:
        """A bare string for allow is a TypeError, not one rule per letter."""
        with pytest.raises(TypeError, match="not the string"):
            Gate(allow="read_*")

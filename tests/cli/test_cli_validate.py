"""``autonomous validate SPEC``: the static checks, their exit status and output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autonomous.spec._validate import validate

from .conftest import cli, write_spec


class TestValidate:
    """The validate command."""

    def test_a_good_spec_passes(self, agent_dir: Path) -> None:
        """A complete spec has no error and no warning, and exits 0."""
        spec = write_spec(agent_dir, "good", "quick")
        done = cli(agent_dir, "validate", str(spec))
        assert 0 == done.returncode, done.stderr
        assert "0 error(s), 0 warning(s)" in done.stdout

    def test_a_bad_spec_lists_every_error_and_exits_1(self, agent_dir: Path) -> None:
        """Each broken part is named by line and key, and the exit status is 1."""
        (agent_dir / "skills").mkdir()
        (agent_dir.parent / "elsewhere.md").write_text("not this agent's")
        (agent_dir / "bad.toml").write_text(
            """
name = "bad"
colour = "blue"
tools = ["brains:undocumented", "nowhere:tool", "brains:NOT_CALLABLE", "brains:tick"]
outcomes = ["done", "completed", "done", ""]
steering_files = ["../elsewhere.md"]
skill_files = ["skills/missing.md"]

[budgets]
max_turns = -1
max_tokens = 5

[permissions]
mode = "sometimes"

[scheduler]
kind = "nap"
"""
        )
        done = cli(agent_dir, "validate", "bad.toml")
        assert 1 == done.returncode
        out = done.stdout
        for expected in (
            "error: bad.toml:3: colour: unknown key",
            "error: bad.toml: model: missing",
            "error: bad.toml:4: tools[0]: 'brains:undocumented'",
            "no description",
            "error: bad.toml:4: tools[1]: cannot import module 'nowhere'",
            "error: bad.toml:4: tools[2]: 'brains:NOT_CALLABLE' is not callable",
            "error: bad.toml:5: outcomes: 'completed' is reserved",
            "error: bad.toml:5: outcomes: 'done' is declared twice",
            "error: bad.toml:5: outcomes: an outcome must be a non-blank string",
            "error: bad.toml:6: steering_files: ../elsewhere.md: outside the agent's directory",
            "error: bad.toml:7: skill_files: skills/missing.md: does not exist",
            "error: bad.toml:10: budgets.max_turns: must be an integer >= 0, got -1",
            "error: bad.toml:11: budgets.max_tokens: unknown key; did you mean 'max_input_tokens'?",
            "error: bad.toml:14: permissions.mode: 'sometimes' is not one of ask, allow",
            "error: bad.toml:17: scheduler.kind: 'nap' is not one of sleep, exit",
        ):
            assert expected in out, f"{expected!r} not in:\n{out}"
        assert "tools[3]" not in out

    def test_json_output_lists_problems(self, agent_dir: Path) -> None:
        """--json gives ok and each problem's severity, where and message."""
        (agent_dir / "s.toml").write_text('model = "scripted:brains:quick"\nnonsense = 1\n')
        done = cli(agent_dir, "validate", "s.toml", "--json")
        report = json.loads(done.stdout)
        assert 1 == done.returncode
        assert report["ok"] is False
        severities = {(p["severity"], p["where"]) for p in report["problems"]}
        assert ("error", "s.toml:2: nonsense") in severities
        assert ("warning", "s.toml: tools") in severities
        assert ("warning", "s.toml: budgets") in severities

    def test_warnings_alone_pass(self, agent_dir: Path) -> None:
        """No tools, no budget and an unanswerable ask mode are warnings: exit 0."""
        (agent_dir / "w.toml").write_text(
            'model = "scripted:brains:quick"\ninstructions = "x"\n[permissions]\nmode = "ask"\n'
        )
        done = cli(agent_dir, "validate", "w.toml")
        assert 0 == done.returncode, done.stdout
        assert "warning: w.toml: tools: no tools declared" in done.stdout
        assert "warning: w.toml: budgets: no budget set" in done.stdout
        assert "warning: w.toml:4: permissions.mode: 'ask' needs someone to answer" in done.stdout


class TestValidateFunction:
    """validate(spec_path) in-process: the checks the command prints."""

    def test_unbounded_and_key_in_file(self, in_process: Path) -> None:
        """max_turns = 0 alone is unbounded (a warning); an api_key in the file is an error."""
        path = in_process / "u.toml"
        path.write_text(
            'model = "openai/gpt-4o-mini"\ninstructions = "x"\ntools = ["brains:tick"]\n'
            '[budgets]\nmax_turns = 0\n[litellm]\napi_key = "sk-123"\n'
            'api_key_env = "SURELY_NOT_SET_ANYWHERE"\n'
        )
        found = {(p.severity, p.where.split(": ")[-1]): p.message for p in validate(path)}
        assert found[("warning", "budgets")].startswith("unbounded")
        assert found[("error", "litellm.api_key")].startswith("never put a key in the file")
        assert "SURELY_NOT_SET_ANYWHERE is not set" in found[("warning", "litellm.api_key_env")]
        assert ("warning", "budgets.per_turn_timeout") in found

    def test_ask_mode_in_a_terminal_is_fine(self, in_process: Path) -> None:
        """With a terminal to prompt on, ask mode is no problem."""
        path = write_spec(in_process, "a", "quick", extra='[permissions]\nmode = "ask"\n')
        assert [] == validate(path, interactive=True)
        assert ["permissions.mode"] == [
            p.where.split(": ")[-1] for p in validate(path, interactive=False)
        ]

    def test_allow_mode_without_allow_rules_is_a_warning(self, in_process: Path) -> None:
        """Allow mode runs only allowlisted tools: with no allow rule, every call is denied."""
        path = write_spec(in_process, "w", "quick", extra='[permissions]\nmode = "allow"\n')
        found = {p.where.split(": ")[-1]: p for p in validate(path)}
        assert "warning" == found["permissions.allow"].severity
        assert "every tool call is denied" in found["permissions.allow"].message
        listed = write_spec(
            in_process, "l", "quick", extra='[permissions]\nmode = "allow"\nallow = ["tick"]\n'
        )
        assert [] == validate(listed)

    def test_tool_names_must_be_free(self, in_process: Path) -> None:
        """A tool named like the done tool, or twice, is an error."""
        path = write_spec(in_process, "n", "quick")
        text = path.read_text().replace(
            'tools = ["brains:tick"]',
            'tools = ["brains:tick", "brains:tick", { ref = "brains:tick", name = "report_done" }]',
        )
        path.write_text(text)
        messages = [p.message for p in validate(path) if p.severity == "error"]
        assert [
            "tool name 'tick' is also brains:tick",
            "'report_done' is the runtime's own tool",
        ] == messages

    def test_an_on_exit_program_that_does_not_exist_is_an_error(self, in_process: Path) -> None:
        """A hook program is found as it will be run (the spec's directory, or PATH): one
        that is not there, or not executable, is an error at on_exit."""
        (in_process / "plain.sh").write_text("#!/bin/sh\n")  # not executable
        (in_process / "hook.sh").write_text("#!/bin/sh\n")
        (in_process / "hook.sh").chmod(0o755)
        for on_exit, found in (
            ('["./nowhere.sh"]', "not found"),
            ('["no-such-program-anywhere", "-x"]', "not found"),
            ('["./plain.sh"]', "not executable"),
        ):
            path = write_spec(in_process, "h", "quick")
            path.write_text(f"on_exit = {on_exit}\n" + path.read_text())
            problems = [p for p in validate(path) if p.where.endswith("on_exit")]
            assert ["error"] == [p.severity for p in problems], (on_exit, problems)
            assert found in problems[0].message, problems[0].message
        for on_exit in ('["./hook.sh"]', '["true"]'):
            path = write_spec(in_process, "h", "quick")
            path.write_text(f"on_exit = {on_exit}\n" + path.read_text())
            assert [] == validate(path), on_exit

    def test_a_rule_naming_no_known_tool_is_a_warning(self, in_process: Path) -> None:
        """An allow rule, or a deny rule naming one tool, that matches none of the spec's
        tools nor the runtime's own is a warning naming the rule; a deny glob is a guard for
        tools to come, and is left alone; rules that match are fine."""
        path = write_spec(
            in_process,
            "r",
            "quick",
            extra='[permissions]\nmode = "allow"\nallow = ["tick", "tik", "tock_*"]\n'
            'deny = ["rm_*", "delete_fiel", { tool = "report_*", admin_only = true }]\n',
        )
        found = [(p.severity, p.where.split(": ")[-1], p.message) for p in validate(path)]
        known = "(tick, report_done): a typo?"
        assert [
            ("warning", "permissions.allow[1]", f"'tik' matches no tool of this spec {known}"),
            ("warning", "permissions.allow[2]", f"'tock_*' matches no tool of this spec {known}"),
            (
                "warning",
                "permissions.deny[1]",
                f"'delete_fiel' matches no tool of this spec {known}",
            ),
        ] == found

    def test_with_mcp_servers_rules_are_not_judged(self, in_process: Path) -> None:
        """An MCP server's tools are known only once it runs: a rule may name one of them, so
        no rule is warned about."""
        path = write_spec(
            in_process,
            "m",
            "quick",
            extra='[permissions]\nmode = "allow"\nallow = ["tick", "read_ticket"]\n'
            f'[[mcp]]\nname = "tickets"\ncommand = "{sys.executable}"\n',
        )
        assert [] == [p for p in validate(path) if "permissions" in p.where]

    def test_not_toml_and_missing_file(self, tmp_path: Path) -> None:
        """A file that is not TOML, or is missing, is an error naming the file."""
        (tmp_path / "x.toml").write_text("model = [unclosed\n")
        assert "not valid TOML" in validate(tmp_path / "x.toml")[0].message
        missing = validate(tmp_path / "nope.toml")
        assert [("error", str(tmp_path / "nope.toml"), "no such file")] == [
            (p.severity, p.where, p.message) for p in missing
        ]

    def test_the_example_spec_is_clean(self) -> None:
        """examples/specs/monitor.toml validates with no error and no warning."""
        spec = Path(__file__).parents[2] / "examples" / "specs" / "monitor.toml"
        try:
            assert [] == validate(spec, interactive=False)
        finally:
            sys.modules.pop("monitor_tools", None)
            sys.path.remove(str(spec.parent.resolve()))

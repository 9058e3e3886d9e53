"""Agent spec files in-process: load_spec, AgentSpec.build_function and run_options."""

from __future__ import annotations

from pathlib import Path

import pytest

from autonomous import Agent, ConfigurationError, run_autonomous
from autonomous.spec import load_spec
from eventlog import MemoryEventLog
from permissions import Gate, Mode, Rule
from scheduler import SleepScheduler

from .conftest import write_spec

FULL = """
name = "full"
model = "scripted:brains:quick"
goal = "g"
instructions = "Be a test."
steering = "Always test."
steering_files = ["steering.md"]
skills = ["Count well."]
skill_files = ["skill.md"]
tools = ["brains:tick", {{ ref = "brains:tick", name = "tock", read_only = true, timeout = 2 }}]
outcomes = ["good", "bad"]

[budgets]
max_turns = 7
max_cost_usd = 0.25
per_turn_timeout = 30

[scheduler]
kind = "{kind}"
max_defer = 600

[permissions]
mode = "allow"
deny = ["rm_*", {{ tool = "deploy", admin_only = true }}]

[run]
continuation_prompt = "go on"
"""


class TestLoadSpec:
    """load_spec and what the spec builds."""

    def test_every_section_is_read(self, in_process: Path) -> None:
        """Each table lands in the spec; paths are the agent directory's."""
        (in_process / "steering.md").write_text("Steer.")
        (in_process / "skill.md").write_text("Skill.")
        path = in_process / "full.toml"
        path.write_text(FULL.format(kind="exit"))
        spec = load_spec(path)
        assert ("full", "full", "cli") == (spec.name, spec.app, spec.user)
        assert in_process.resolve() == spec.base_dir
        assert ("good", "bad") == spec.outcomes
        assert {"max_turns": 7, "max_cost_usd": 0.25, "per_turn_timeout": 30} == spec.budgets
        assert (Rule("rm_*"), Rule("deploy", admin_only=True)) == spec.deny

    def test_run_options(self, in_process: Path) -> None:
        """run_options gives budgets, the scheduler, outcomes and the gate as keywords."""
        path = in_process / "full.toml"
        path.write_text(FULL.format(kind="sleep"))
        options = load_spec(path).run_options()
        assert 7 == options["max_turns"]
        assert isinstance(options["scheduler"], SleepScheduler)
        assert 600 == options["max_defer"]
        assert ("good", "bad") == options["outcomes"]
        assert "go on" == options["continuation_prompt"]
        gate = options["permissions_gate"]
        assert isinstance(gate, Gate) and Mode.ALLOW == gate.mode

    def test_build_function_makes_an_agent(self, in_process: Path) -> None:
        """build(extra_tools) gives an Agent with the spec's tools, steering and session."""
        (in_process / "steering.md").write_text("Steer.")
        (in_process / "skill.md").write_text("Skill.")
        path = in_process / "full.toml"
        path.write_text(FULL.format(kind="exit"))
        spec = load_spec(path)
        ref = spec.session_ref(MemoryEventLog(), "s-1")
        agent = spec.build_function(ref)([])
        assert isinstance(agent, Agent)
        assert ["tick", "tock"] == [t.name for t in agent.tools]
        assert agent.tools[1].read_only
        assert ref == agent.session
        prompt = agent.system_prompt()
        assert "Always test." in prompt and "Steer." in prompt and "Skill." in prompt

    def test_build_adopts_a_resumed_session(self, in_process: Path) -> None:
        """build(extra_tools, session_id) puts the agent on that session of the same log."""
        spec = load_spec(write_spec(in_process, "a", "quick"))
        ref = spec.session_ref(MemoryEventLog(), "first")
        agent = spec.build_function(ref)([], "other")
        assert agent.session is not None and "other" == agent.session.session_id
        assert ref.log is agent.session.log

    @pytest.mark.anyio
    async def test_a_spec_runs(self, in_process: Path) -> None:
        """The built agent and the options run to completion through run_autonomous."""
        spec = load_spec(write_spec(in_process, "a", "quick"))
        ref = spec.session_ref(MemoryEventLog(), "s")
        result = await run_autonomous(spec.build_function(ref), spec.goal, **spec.run_options())
        assert ("completed", "all done") == (result.reason.value, result.done_detail)

    def test_errors_name_the_file_and_the_key(self, in_process: Path) -> None:
        """A broken spec raises one ConfigurationError naming the file and every bad key."""
        path = in_process / "broken.toml"
        path.write_text('model = "m"\n[budgets]\nmax_turns = "many"\n[litellm]\napi_key = "k"\n')
        with pytest.raises(ConfigurationError) as caught:
            load_spec(path)
        text = str(caught.value)
        assert str(path) in text
        assert "budgets.max_turns: must be an integer >= 0, got 'many'" in text
        assert "litellm.api_key: never put a key in the file" in text

    def test_api_key_env_is_read_at_build(
        self, in_process: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """api_key_env names a variable; build reads it; an unset one is a clear error."""
        path = in_process / "k.toml"
        path.write_text('model = "openai/x"\n[litellm]\napi_key_env = "TEST_CLI_KEY"\n')
        spec = load_spec(path)
        monkeypatch.delenv("TEST_CLI_KEY", raising=False)
        with pytest.raises(ConfigurationError, match="TEST_CLI_KEY is not set"):
            spec.completion_kwargs()
        monkeypatch.setenv("TEST_CLI_KEY", "sk-test")
        assert {"api_key": "sk-test"} == spec.completion_kwargs()

    def test_bad_tool_reference_fails_at_build(self, in_process: Path) -> None:
        """A tool that cannot be imported is refused before the run, naming the entry."""
        broken = in_process / "b.toml"
        broken.write_text('model = "scripted:brains:quick"\ntools = ["brains:no_such_tool"]\n')
        spec = load_spec(broken)
        with pytest.raises(ConfigurationError, match=r"tools\[0\]: module 'brains' has no"):
            spec.build_function(spec.session_ref(MemoryEventLog(), "x"))

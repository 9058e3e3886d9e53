"""Specification of Agent and its steering: the model, tools, options and the system prompt."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from autonomous import Agent, ConfigurationError, run_autonomous
from autonomous._models._litellm import LiteLLMModel
from autonomous._models._local import LocalModel
from autonomous._steering import LoadedFiles, Problem, check_scoped, load_scoped
from autonomous.testing import ScriptedModel, done, reply

from .helpers import TICK

SECRET = "TOP-SECRET-STEERING-TEXT"


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (making its directory) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    """The agent's own directory, with a sibling directory holding a secret file."""
    write(tmp_path / "other" / "secret.md", SECRET)
    (tmp_path / "agent").mkdir()
    return (tmp_path / "agent").resolve()


def scripted(**options: Any) -> Agent:
    """An Agent on a ScriptedModel with ``options``."""
    return Agent(ScriptedModel(), **options)


def skipped(logs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The (path, reason) of every ``steering_file_skipped`` log entry."""
    return [(e["path"], e["reason"]) for e in logs if e["event"] == "steering_file_skipped"]


class TestAgentModel:
    def test_model_string_becomes_a_litellm_model(self) -> None:
        """A model string becomes a LiteLLMModel carrying the completion keywords."""
        agent = Agent("openai/gpt-4o-mini", temperature=0.2)
        assert isinstance(agent.model, LiteLLMModel)
        assert ("openai/gpt-4o-mini", {"temperature": 0.2}) == (
            agent.model.name,
            dict(agent.model.completion_kwargs),
        )

    def test_a_local_model_string_becomes_a_local_model(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``local/<name>`` is routed to LocalModel (here with the extra's check stubbed: the
        check itself is tested with the local model), keywords and all."""
        import autonomous._models._local as local
        import autonomous._models._local_engine as engine

        checked: list[str] = []
        for module in (local, engine):
            monkeypatch.setattr(module, "check_local_model", checked.append)
        agent = Agent("local/smollm2", max_tokens=8)
        assert isinstance(agent.model, LocalModel)
        assert ({"local/smollm2"}, {"max_tokens": 8}) == (
            set(checked),
            dict(agent.model.completion_kwargs),
        )
        assert not isinstance(Agent("openai/gpt-4o-mini").model, LocalModel)

    def test_none_completion_keywords_are_dropped(self) -> None:
        """Completion keywords set to None never reach litellm."""
        agent = Agent("openai/gpt-4o-mini", api_base=None, temperature=0.0)
        assert isinstance(agent.model, LiteLLMModel)
        assert {"temperature": 0.0} == dict(agent.model.completion_kwargs)

    def test_model_object_is_kept(self) -> None:
        """A Model object is used as it is."""
        model = ScriptedModel()
        assert model is Agent(model, api_key=None).model

    def test_blank_model_string_is_refused(self) -> None:
        """A blank model string is a ConfigurationError."""
        with pytest.raises(ConfigurationError, match="non-blank"):
            Agent("  ")

    def test_completion_keywords_with_a_model_object_are_refused(self) -> None:
        """Completion keywords only apply to model strings."""
        with pytest.raises(ConfigurationError, match="temperature"):
            Agent(ScriptedModel(), temperature=0.5)

    def test_something_else_is_refused(self) -> None:
        """A model that is neither a string nor a Model is a ConfigurationError."""
        with pytest.raises(ConfigurationError, match="string or a Model"):
            Agent(42)  # type: ignore[arg-type]


class TestAgentTools:
    def test_tools_are_kept_in_order(self) -> None:
        """The tools are a tuple in the order given."""
        assert (TICK,) == scripted(tools=[TICK]).tools

    def test_duplicate_tool_names_are_refused(self) -> None:
        """Two tools with one name are a ConfigurationError naming the tool."""
        with pytest.raises(ConfigurationError, match="more than one tool named tick"):
            scripted(tools=[TICK, TICK])

    def test_non_tools_are_refused(self) -> None:
        """Anything but a Tool among the tools is a ConfigurationError."""
        with pytest.raises(ConfigurationError, match="Tool objects"):
            scripted(tools=[TICK, "tick"])


class TestAgentOptions:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"session": "s1"}, "SessionRef"),
            ({"instructions": 3}, "instructions must be a string"),
            ({"steering": ["be nice"]}, "steering must be a string"),
            ({"skills": "one skill"}, "skills must be a list of strings"),
            ({"skills": ["ok", 7]}, "skills must be strings"),
            ({"steering_files": "style.md"}, "steering_files must be a list of file paths"),
            ({"skill_files": Path("a.md")}, "skill_files must be a list of file paths"),
            ({"steering_files": ["a.md", 1]}, "steering_files must be str or path objects"),
            ({"skill_files": [b"a.md"]}, "skill_files must be str or path objects"),
            ({"base_dir": 5}, "base_dir must be a str or path object"),
        ],
    )
    def test_wrong_types_are_refused(self, options: dict[str, Any], message: str) -> None:
        """An option of the wrong type is a ConfigurationError naming the option."""
        with pytest.raises(ConfigurationError, match=message):
            scripted(**options)

    def test_base_dir_defaults_to_the_working_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without base_dir, the agent's directory is the working directory at construction."""
        monkeypatch.chdir(tmp_path)
        agent = scripted()
        monkeypatch.chdir(tmp_path.parent)
        assert tmp_path.resolve() == agent.base_dir.resolve()

    def test_relative_base_dir_is_made_absolute(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A relative base_dir is taken from the working directory at construction."""
        monkeypatch.chdir(tmp_path)
        assert (tmp_path / "agent").resolve() == scripted(base_dir="agent").base_dir

    def test_repr_names_the_agent(self) -> None:
        """The repr shows the name, the model and the number of tools."""
        assert "Agent(name='a', model='scripted', tools=1)" == repr(
            scripted(name="a", tools=[TICK])
        )


class TestSystemPrompt:
    def test_instructions_alone(self) -> None:
        """Without steering or skills the prompt is the instructions."""
        assert "Be brief." == scripted(instructions="  Be brief.\n").system_prompt()

    def test_nothing_gives_an_empty_prompt(self) -> None:
        """No instructions, steering or skills give an empty system prompt."""
        assert "" == scripted(steering="  ", skills=["", " "]).system_prompt()

    def test_steering_text_and_files_in_order(self, agent_dir: Path) -> None:
        """Steering text, then one section per file in the declared order, framed as binding."""
        write(agent_dir / "steering" / "b.md", "Rule B.\n")
        write(agent_dir / "steering" / "a.md", "Rule A.\n")
        agent = scripted(
            instructions="Hi.",
            steering="Never guess.",
            steering_files=["steering/b.md", agent_dir / "steering" / "a.md"],
            base_dir=agent_dir,
        )
        assert (
            "Hi.\n\n"
            "# Steering (persistent operating context — always follow it)\n\n"
            "Never guess.\n\n"
            "## b.md\nRule B.\n\n"
            "## a.md\nRule A."
        ) == agent.system_prompt()

    def test_skills_are_framed_as_conditional(self, agent_dir: Path) -> None:
        """Skills come after steering, framed as applied when relevant, one section each."""
        write(agent_dir / "skills" / "review.md", "Check the diff.")
        agent = scripted(
            steering="Be kind.",
            skills=["Write tests.", "Use SI units."],
            skill_files=["skills/review.md"],
            base_dir=agent_dir,
        )
        assert (
            "# Steering (persistent operating context — always follow it)\n\n"
            "Be kind.\n\n"
            "# Skills (apply the following skills/instructions when relevant)\n\n"
            "## Skill 1\nWrite tests.\n\n"
            "## Skill 2\nUse SI units.\n\n"
            "## review.md\nCheck the diff."
        ) == agent.system_prompt()

    def test_files_alone_make_a_block(self, agent_dir: Path) -> None:
        """A steering file without steering text still gets the steering block."""
        write(agent_dir / "s.md", "Rule.")
        agent = scripted(steering_files=["s.md"], base_dir=agent_dir)
        expected = "# Steering (persistent operating context — always follow it)\n\n## s.md\nRule."
        assert expected == agent.system_prompt()

    def test_files_are_read_when_the_prompt_is_built(self, agent_dir: Path) -> None:
        """A file is read by system_prompt, not when the Agent is made."""
        agent = scripted(steering_files=["late.md"], base_dir=agent_dir)
        write(agent_dir / "late.md", "Written after construction.")
        assert "Written after construction." in agent.system_prompt()

    def test_relative_paths_are_taken_from_base_dir(
        self, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A relative path is found in base_dir, whatever the working directory."""
        write(agent_dir / "s.md", "From the agent directory.")
        monkeypatch.chdir(agent_dir.parent)
        agent = scripted(steering_files=["s.md"], base_dir=agent_dir)
        assert "From the agent directory." in agent.system_prompt()

    def test_symlink_inside_base_dir_is_followed(self, agent_dir: Path) -> None:
        """A symlink to a file inside base_dir loads, under the declared name."""
        write(agent_dir / "real.md", "Real rule.")
        (agent_dir / "alias.md").symlink_to(agent_dir / "real.md")
        agent = scripted(steering_files=["alias.md"], base_dir=agent_dir)
        assert "## alias.md\nReal rule." in agent.system_prompt()

    def test_any_text_path_like_is_a_path(self, agent_dir: Path) -> None:
        """An os.PathLike that gives a str is a valid steering path."""

        class Custom(os.PathLike[str]):
            def __fspath__(self) -> str:
                return "c.md"

        write(agent_dir / "c.md", "Custom.")
        agent = scripted(steering_files=[Custom()], base_dir=agent_dir)
        assert "## c.md\nCustom." in agent.system_prompt()

    @pytest.mark.anyio
    async def test_a_run_sends_the_prompt_as_the_system_message(self, agent_dir: Path) -> None:
        """The model sees the steering file's text in the run's system message."""
        write(agent_dir / "s.md", "Always answer in French.")
        model = ScriptedModel([done(), reply("fini")])

        def build(tools: list[Any]) -> Agent:
            return Agent(model, tools=tools, steering_files=["s.md"], base_dir=agent_dir)

        await run_autonomous(build, "go")
        system = model.last_messages[0]
        assert ("system", True) == (system["role"], "Always answer in French." in system["content"])


class TestScope:
    @pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
    def test_files_outside_base_dir_are_refused_and_logged(
        self, agent_dir: Path, kind: str
    ) -> None:
        """A path resolving outside base_dir is skipped with a warning and never read."""
        secret = agent_dir.parent / "other" / "secret.md"
        declared: dict[str, str] = {
            "absolute": str(secret),
            "dotdot": "../other/secret.md",
            "symlink": "link.md",
        }
        (agent_dir / "link.md").symlink_to(secret)
        agent = scripted(
            steering="Own rule.",
            steering_files=[declared[kind]],
            skill_files=[declared[kind]],
            base_dir=agent_dir,
        )
        with capture_logs() as logs:
            prompt = agent.system_prompt()
        assert "Own rule." in prompt
        assert SECRET not in prompt
        assert 2 == len(skipped(logs))
        assert all(
            path == declared[kind] and reason.startswith("outside the agent's directory")
            for path, reason in skipped(logs)
        )
        assert all(e["log_level"] == "warning" for e in logs)
        assert SECRET not in repr(logs)

    def test_missing_file_is_skipped_with_a_warning(self, agent_dir: Path) -> None:
        """A missing file is skipped at run time: the prompt is built, a warning logged."""
        agent = scripted(steering="Own rule.", steering_files=["gone.md"], base_dir=agent_dir)
        with capture_logs() as logs:
            prompt = agent.system_prompt()
        expected = "# Steering (persistent operating context — always follow it)\n\nOwn rule."
        assert expected == prompt
        assert [("gone.md", "does not exist")] == skipped(logs)
        assert [Problem("warning", "gone.md", "does not exist")] == agent.steering_problems()

    def test_log_names_the_channel(self, agent_dir: Path) -> None:
        """The skip warning says whether it was a steering or a skill file."""
        with capture_logs() as logs:
            scripted(skill_files=["gone.md"], base_dir=agent_dir).system_prompt()
        assert ["skill"] == [e["kind"] for e in logs]

    def test_directory_is_not_a_file(self, agent_dir: Path) -> None:
        """A directory inside base_dir is skipped as not a file."""
        (agent_dir / "steering").mkdir()
        loaded = load_scoped(["steering"], agent_dir)
        assert (Problem("warning", "steering", "is not a file"),) == loaded.problems

    def test_non_utf8_file_is_unreadable(self, agent_dir: Path) -> None:
        """A file that is not UTF-8 text is skipped as unreadable."""
        (agent_dir / "bin.md").write_bytes(b"\xff\xfe\x00")
        loaded = load_scoped(["bin.md"], agent_dir)
        assert ((), ("cannot be read: not UTF-8 text",)) == (
            loaded.files,
            tuple(p.message for p in loaded.problems),
        )

    def test_load_keeps_the_declared_order(self, agent_dir: Path) -> None:
        """Loaded files come back in the declared order, with their declared names."""
        write(agent_dir / "x" / "two.md", "2")
        write(agent_dir / "one.md", "1")
        loaded = load_scoped(["one.md", "gone.md", "x/two.md"], agent_dir)
        assert (["one.md", "two.md"], ["1", "2"], ["gone.md"]) == (
            [f.name for f in loaded.files],
            [f.text for f in loaded.files],
            [p.path for p in loaded.problems],
        )

    def test_nothing_declared_loads_nothing(self, agent_dir: Path) -> None:
        """No paths give an empty LoadedFiles."""
        assert LoadedFiles() == load_scoped([], agent_dir)


class TestCheckScoped:
    def test_good_files_have_no_problems(self, agent_dir: Path) -> None:
        """Files inside base_dir that exist pass the check."""
        write(agent_dir / "a.md", "A")
        assert [] == check_scoped(["a.md", agent_dir / "a.md"], agent_dir)

    def test_missing_file_is_an_error(self, agent_dir: Path) -> None:
        """A missing file, a warning at run time, is an error in validation."""
        assert [Problem("error", "gone.md", "does not exist")] == check_scoped(
            ["gone.md"], agent_dir
        )

    @pytest.mark.parametrize("entry", ["../other/secret.md", "link.md", "ABSOLUTE"])
    def test_outside_base_dir_is_an_error(self, agent_dir: Path, entry: str) -> None:
        """A path resolving outside base_dir is an error, however it gets there."""
        secret = agent_dir.parent / "other" / "secret.md"
        (agent_dir / "link.md").symlink_to(secret)
        entry = str(secret) if entry == "ABSOLUTE" else entry
        problems = check_scoped([entry], agent_dir)
        assert [("error", entry)] == [(p.severity, p.path) for p in problems]
        assert problems[0].message.startswith("outside the agent's directory")

    @pytest.mark.parametrize(
        ("entry", "message"),
        [(3, "not a file path: a int"), (None, "not a file path: a NoneType"), ("", "blank")],
    )
    def test_entries_that_are_not_paths_are_errors(
        self, agent_dir: Path, entry: object, message: str
    ) -> None:
        """An entry that is not a non-blank string or path is an error."""
        [problem] = check_scoped([entry], agent_dir)
        assert ("error", True) == (problem.severity, problem.message.endswith(message))

    @pytest.mark.parametrize("paths", ["a.md", {"a.md": 1}, 3])
    def test_a_non_list_is_an_error(self, agent_dir: Path, paths: object) -> None:
        """Paths that are not a list of entries give one error."""
        [problem] = check_scoped(paths, agent_dir)
        assert ("error", "expected a list of file paths") == (problem.severity, problem.message)

    def test_check_logs_nothing(self, agent_dir: Path) -> None:
        """The static check reports, it does not log."""
        with capture_logs() as logs:
            check_scoped(["gone.md"], agent_dir)
        assert [] == logs

    def test_problem_reads_as_one_line(self) -> None:
        """A problem prints as severity, path and message."""
        assert "error: a.md: does not exist" == str(Problem("error", "a.md", "does not exist"))

    def test_problem_severity_is_closed(self) -> None:
        """A severity other than error or warning is refused."""
        with pytest.raises(ValueError, match="severity"):
            Problem("fatal", "a.md", "x")  # type: ignore[arg-type]


class TestSteeringProblems:
    def test_before_a_build_it_is_a_fresh_check(self, agent_dir: Path) -> None:
        """Before system_prompt, steering_problems runs the static check (errors)."""
        agent = scripted(steering_files=["gone.md"], skill_files=["../x.md"], base_dir=agent_dir)
        assert [("error", "gone.md"), ("error", "../x.md")] == [
            (p.severity, p.path) for p in agent.steering_problems()
        ]

    def test_after_a_build_it_is_what_the_build_skipped(self, agent_dir: Path) -> None:
        """After system_prompt, steering_problems lists the files that build skipped."""
        agent = scripted(steering_files=["gone.md"], base_dir=agent_dir)
        agent.system_prompt()
        write(agent_dir / "gone.md", "now here")
        assert [Problem("warning", "gone.md", "does not exist")] == agent.steering_problems()

    def test_no_files_no_problems(self) -> None:
        """An agent without files has no steering problems."""
        assert [] == scripted(steering="x", skills=["y"]).steering_problems()

    def test_path_objects_are_accepted(self, agent_dir: Path) -> None:
        """Path objects work like strings, relative or absolute."""
        write(agent_dir / "a.md", "A")
        agent = scripted(steering_files=[Path("a.md"), agent_dir / "a.md"], base_dir=agent_dir)
        assert ([], 2) == (agent.steering_problems(), agent.system_prompt().count("## a.md"))

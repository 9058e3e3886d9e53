"""Specification of the per-run shortcuts: each one gives what the long way gave."""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from autonomous import (
    Agent,
    AutonomousStatus,
    BuildError,
    ConfigurationError,
    StopReason,
    start_autonomous,
)
from autonomous._agent import _is_model
from autonomous._controls import Latch
from autonomous._model import Model
from autonomous._options import make_options
from autonomous.testing import ScriptedModel, reply

from .helpers import builder

pytestmark = pytest.mark.anyio


class TestLatch:
    async def test_waiters_wake_when_set(self) -> None:
        """Every task waiting on the latch returns once it is set."""
        latch, woke = Latch(), []

        async def waiter(n: int) -> None:
            await latch.wait()
            woke.append(n)

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(waiter, n)
            await anyio.wait_all_tasks_blocked()
            assert [] == woke
            latch.set()
        assert [0, 1, 2] == sorted(woke)

    async def test_wait_after_set_returns_at_once(self) -> None:
        """A latch already set is waited for by a checkpoint only; setting again is a no-op."""
        latch = Latch()
        latch.set()
        latch.set()
        with anyio.fail_after(1):
            await latch.wait()
        assert latch.is_set()

    async def test_a_cancelled_waiter_is_forgotten(self) -> None:
        """A waiter cancelled before the set leaves nothing behind once another one waits."""
        latch = Latch()
        with anyio.move_on_after(0.01):
            await latch.wait()
        waiting = latch.wait()
        assert 1 == len(latch._waiters or [])
        latch.set()
        await waiting


class TestStartedContext:
    async def test_it_can_be_entered_once(self) -> None:
        """A second ``async with`` of the same start_autonomous(...) is refused."""
        started = start_autonomous(builder(ScriptedModel([reply("a")])), "go", max_turns=1)
        async with started as handle:
            await handle.wait()
        with pytest.raises(RuntimeError, match="only once"):
            async with started:
                pass

    async def test_the_bodys_error_comes_out_and_the_run_stops(self) -> None:
        """An error in the block comes out of it (in the task group's group) once the run is
        stopped."""
        gate = anyio.Event()

        async def blocked(messages: object, tools: object) -> Any:
            await gate.wait()
            return reply("late")

        started = start_autonomous(builder(ScriptedModel([blocked])), "go", max_turns=1)
        with pytest.raises(ExceptionGroup) as info:
            async with started as handle:
                await handle.ready()
                raise LookupError("from the body")
        assert info.group_contains(LookupError, match="from the body")
        assert AutonomousStatus.STOPPED == handle.status
        assert StopReason.CONTEXT_CANCELLED == (await handle.wait()).reason

    async def test_a_build_failure_is_raised_by_wait_not_by_leaving(self) -> None:
        """The run's own failure comes from wait(); leaving the block raises nothing."""

        def broken(extra: object) -> Agent:
            raise ValueError("no agent")

        async with start_autonomous(broken, "go") as handle:
            with pytest.raises(BuildError, match="no agent"):
                await handle.wait()
        assert AutonomousStatus.FAILED == handle.status


class _NamedOnly:
    name = "n"


class _CompleteIsNone:
    name = "n"
    complete = None


class _Full:
    name = "n"

    async def complete(self, messages: object, tools: object) -> object:
        return None


class _FullButCompleteRemoved(_Full):
    def __init__(self) -> None:
        self.complete = None  # type: ignore[method-assign,assignment]


class TestModelCheck:
    def test_the_protocol_still_has_two_members(self) -> None:
        """The quick check knows Model by ``name`` and ``complete``; a new member needs it too."""
        members = {n for n in vars(Model) if not n.startswith("_")}
        assert {"name", "complete"} == members

    @pytest.mark.parametrize(
        "value",
        [
            ScriptedModel(),
            _Full(),
            _NamedOnly(),
            _CompleteIsNone(),
            _FullButCompleteRemoved(),
            object(),
            "openai/gpt-4o-mini",
            None,
        ],
    )
    def test_it_agrees_with_isinstance(self, value: object) -> None:
        """The quick check answers what ``isinstance(value, Model)`` answers."""
        assert isinstance(value, Model) == _is_model(value)


class TestOptionShortcuts:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [(2, 2.0), (2.5, 2.5), (timedelta(seconds=3), 3.0), (0, 0.0)],
    )
    def test_seconds_become_floats(self, value: Any, expected: float) -> None:
        """Seconds given as an int, a float or a timedelta are stored as a float."""
        got = make_options({"max_wallclock": value}).max_wallclock
        assert (expected, float) == (got, type(got))

    @pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, -math.inf, True, "3"])
    def test_bad_seconds_are_refused(self, value: Any) -> None:
        """A negative, infinite, NaN, boolean or text number of seconds is refused."""
        with pytest.raises(ConfigurationError, match="per_turn_timeout"):
            make_options({"per_turn_timeout": value})

    @pytest.mark.parametrize("value", [-1, True, 1.0, None])
    def test_bad_counts_are_refused(self, value: Any) -> None:
        """A count must be an int (not a bool) at or above its minimum."""
        with pytest.raises(ConfigurationError, match="max_turns must be an integer"):
            make_options({"max_turns": value})

    def test_unknown_option_lists_the_known_ones(self) -> None:
        """An unknown keyword names itself and every known option."""
        with pytest.raises(ConfigurationError, match=r"unknown option\(s\) bogus; the options are"):
            make_options({"bogus": 1, "max_turns": 1})

    def test_outcomes_become_a_tuple(self) -> None:
        """A list of outcomes is stored as a tuple."""
        assert ("a", "b") == make_options({"outcomes": ["a", "b"]}).outcomes


class TestSystemPrompt:
    def test_an_agent_without_steering_gives_its_instructions(self) -> None:
        """No steering and no skills: the prompt is the stripped instructions, no problems."""
        agent = Agent(ScriptedModel(), instructions="  Be brief.  ")
        assert ("Be brief.", []) == (agent.system_prompt(), agent.steering_problems())

    def test_blank_steering_adds_no_block(self) -> None:
        """Whitespace-only steering text leaves the prompt as the instructions alone."""
        agent = Agent(ScriptedModel(), instructions="Be brief.", steering="  ")
        assert "Be brief." == agent.system_prompt()

    def test_the_default_base_dir_follows_the_working_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Agents made in different working directories get each their own."""
        monkeypatch.chdir(tmp_path)
        first = Agent(ScriptedModel()).base_dir
        (tmp_path / "sub").mkdir()
        monkeypatch.chdir(tmp_path / "sub")
        assert (Path(tmp_path), Path(tmp_path / "sub")) == (first, Agent(ScriptedModel()).base_dir)


#: A run in a fresh interpreter (the program's own imports come before it).
_ONE_RUN = (
    "import anyio\n"
    "from autonomous import Agent, run_autonomous\n"
    "from autonomous.testing import ScriptedModel, reply\n"
    "model = ScriptedModel([reply('a')])\n"
    "build = lambda extra: Agent(model, tools=extra)\n"
    "anyio.run(lambda: run_autonomous(build, 'go', max_turns=1))\n"
)


def _last_line(code: str) -> str:
    """The last line ``code`` prints in a fresh interpreter (the run's logs come before it)."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.splitlines()[-1]


class TestTelemetryDetection:
    def test_a_run_without_opentelemetry_imports_none(self) -> None:
        """While the program has not imported opentelemetry, runs neither import nor use it."""
        code = "import sys\n" + _ONE_RUN + "print('opentelemetry.trace' in sys.modules)\n"
        assert "False" == _last_line(code)

    def test_a_configured_provider_is_used(self) -> None:
        """A program that set an SDK tracer provider gets the run's spans."""
        code = (
            "from opentelemetry import trace\n"
            "from opentelemetry.sdk.trace import TracerProvider\n"
            "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
            "from opentelemetry.sdk.trace.export.in_memory_span_exporter import "
            "InMemorySpanExporter\n"
            "spans = InMemorySpanExporter()\n"
            "provider = TracerProvider()\n"
            "provider.add_span_processor(SimpleSpanProcessor(spans))\n"
            "trace.set_tracer_provider(provider)\n"
            + _ONE_RUN
            + "print(sorted({s.name for s in spans.get_finished_spans()}))\n"
        )
        expected = "['autonomous.model_call', 'autonomous.run', 'autonomous.turn']"
        assert expected == _last_line(code)

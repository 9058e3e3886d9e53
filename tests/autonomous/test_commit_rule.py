"""One commit rule: when a run commits what it did never depends on who listens.

A run with a progress callback, a stream reader, a supervisor or telemetry commits the same
events in the same transactions as the same run with nobody listening; and a listener hears of
a model call's answer or a checkpoint only once the log has it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from autonomous import (
    CheckpointWritten,
    ModelCalled,
    Proceed,
    ProgressEvent,
    RetryDecision,
    RunExited,
    run_autonomous,
    start_autonomous,
)
from autonomous.testing import FakeClock, ScriptedModel, call, done, reply
from eventlog import EventKind, SessionRef
from scheduler import ExitOnDeferScheduler, SleepScheduler

from ..support.otel import Otel
from ..support.watched_logs import CommitLog
from .helpers import TICK, builder

pytestmark = pytest.mark.anyio

#: A wake time already past: a scheduled wait ends at once.
PAST = {"wake_at": "2000-01-01T00:00:00Z"}


def _sleeping(scheduler: type[SleepScheduler] | None, **options: Any) -> dict[str, Any]:
    """``options`` on a fake clock (the same wake times whatever listens), with a
    ``scheduler`` on it (None: the one that exits deferred)."""
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    chosen = ExitOnDeferScheduler() if scheduler is None else scheduler(clock=clock)
    return {"clock": clock, "scheduler": chosen, **options}


#: Each scenario: its script, and the options of its run besides the listeners.
SCENARIOS: dict[str, tuple[Callable[[], list[Any]], Callable[[], dict[str, Any]]]] = {
    # Turn 1: a tool, then an answer; turn 2: an answer; the run ends on max_turns after it.
    "budget": (
        lambda: [call("tick", {"n": 1}), reply("a"), reply("b")],
        lambda: {"max_turns": 2},
    ),
    # The done tool ends the run in its turn, after a tool call and before a closing answer.
    "done": (
        lambda: [reply("a"), call("tick", {"n": 1}), done("ok"), reply("summary")],
        lambda: {"max_turns": 3},
    ),
    # A failed turn, skipped, then a good one.
    "failed": (
        lambda: [RuntimeError("flaky"), reply("b")],
        lambda: {"max_turns": 2, "retry_policy": lambda error, attempt: RetryDecision.SKIP_TURN},
    ),
    # A scheduled wait (over at once), then a turn that completes.
    "slept": (
        lambda: [call("schedule_next_turn", PAST), reply("zz"), done("ok"), reply("s")],
        lambda: _sleeping(SleepScheduler, max_turns=3),
    ),
    # A schedule that ends the run deferred.
    "deferred": (
        lambda: [call("schedule_next_turn", PAST), reply("zz")],
        lambda: _sleeping(None),
    ),
}

#: Who listens: the run's options that add them (a stream reader is added by the test).
LISTENERS = ("nobody", "callback", "async callback", "reader", "supervisor", "telemetry")


async def _run(scenario: str, listener: str) -> tuple[CommitLog, list[ProgressEvent]]:
    """Run ``scenario`` on a fresh durable log with ``listener``; the log and the events the
    listener heard (none for the supervisor and telemetry)."""
    script, options_of = SCENARIOS[scenario]
    options = options_of()
    log = CommitLog()
    ref = SessionRef(log, "test", "tester", "s1")
    build = builder(ScriptedModel(script()), tools=[TICK], session=ref)
    heard: list[ProgressEvent] = []
    extra: dict[str, Any] = {}
    if listener == "callback":
        extra["progress"] = lambda turn, event: heard.append(event)
    elif listener == "async callback":

        async def progress(turn: int, event: ProgressEvent) -> None:
            await anyio.lowlevel.checkpoint()
            heard.append(event)

        extra["progress"] = progress
    elif listener == "supervisor":
        extra["supervisor"] = lambda snapshot: Proceed()
    elif listener == "telemetry":
        extra["telemetry"] = Otel().telemetry
    with anyio.fail_after(10):
        if listener == "reader":
            async with start_autonomous(build, "go", **options) as handle:
                heard.extend([event async for event in handle.events()])
        else:
            await run_autonomous(build, "go", **options, **extra)
    return log, heard


class TestTheSameCommitsWhoeverListens:
    @pytest.mark.parametrize("scenario", sorted(SCENARIOS))
    @pytest.mark.parametrize("listener", LISTENERS[1:])
    async def test_a_listener_changes_no_commit(self, scenario: str, listener: str) -> None:
        """The run commits the same events in the same transactions with ``listener`` as with
        nobody listening."""
        alone, _ = await _run(scenario, "nobody")
        watched, _ = await _run(scenario, listener)
        assert alone.commits == watched.commits

    async def test_one_commit_per_model_call(self) -> None:
        """Each model call's answer is committed once, with what came before it since the
        last commit; a turn's last answer goes in with the checkpoint after it, and the last
        turn's with the run's final checkpoint, which drops the lease."""
        log, _ = await _run("budget", "callback")
        assert [
            ("acquire_lease",),
            ("budgets", "checkpoint"),
            ("user_message", "assistant_message"),
            ("tool_result", "assistant_message", "checkpoint"),
            ("user_message", "assistant_message", "checkpoint", "release_lease"),
        ] == log.commits


class TestListenersHearOfWhatIsCommitted:
    @pytest.mark.parametrize("scenario", sorted(SCENARIOS))
    async def test_a_callback_never_hears_of_an_answer_or_checkpoint_not_in_the_log(
        self, scenario: str
    ) -> None:
        """When the callback hears of a model call's answer or a checkpoint, the log has as
        many answers (checkpoints) as it has heard of, counting this one."""
        script, options_of = SCENARIOS[scenario]
        log = CommitLog()
        ref = SessionRef(log, "test", "tester", "s1")
        heard = {ModelCalled: 0, CheckpointWritten: 0}
        logged = {ModelCalled: EventKind.ASSISTANT_MESSAGE, CheckpointWritten: EventKind.CHECKPOINT}
        short: list[tuple[str, int, int]] = []

        async def progress(turn: int, event: ProgressEvent) -> None:
            kind = type(event)
            if kind in logged:
                heard[kind] += 1
                committed = len(await log.read(ref.key, kinds=[logged[kind]]))
                if committed < heard[kind]:
                    short.append((kind.__name__, heard[kind], committed))

        build = builder(ScriptedModel(script()), tools=[TICK], session=ref)
        await run_autonomous(build, "go", progress=progress, **options_of())
        assert ([], True) == (short, heard[ModelCalled] > 0 and heard[CheckpointWritten] > 0)

    @pytest.mark.parametrize("scenario", sorted(SCENARIOS))
    async def test_every_listener_hears_the_same_events_in_order(self, scenario: str) -> None:
        """A callback, an async callback and a stream reader hear the same events, in the
        same order, whatever waits for a commit."""
        heard: list[Sequence[ProgressEvent]] = []
        for listener in ("callback", "async callback", "reader"):
            heard.append((await _run(scenario, listener))[1])
        assert heard[0] == heard[1] == heard[2]
        assert isinstance(heard[0][-1], RunExited)

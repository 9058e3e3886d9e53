"""Durable sessions: deferral, resume, the lease, the durable inbox, schedules, history windows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest

from autonomous import (
    Agent,
    StopReason,
    resume_autonomous,
    run_autonomous,
    send_control,
    send_inject,
    start_autonomous,
)
from autonomous.testing import FakeClock, ScriptedModel, call, done, reply
from eventlog import (
    EventKind,
    LeaseHolder,
    SessionLocked,
    SessionRef,
)
from scheduler import ExitOnDeferScheduler, SleepScheduler

from ..support.litellm_http import wait_until
from .helpers import asleep, checkpoints
from .stores import DurableStore

pytestmark = pytest.mark.anyio


def schedule(seconds: int, prompt: str = "check again", detail: str = "") -> Any:
    """A schedule_next_turn call."""
    return call(
        "schedule_next_turn", {"wake_in_sec": seconds, "next_prompt": prompt, "detail": detail}
    )


def builders(model: ScriptedModel, ref: SessionRef) -> tuple[Any, Any]:
    """A (build, rebuild) pair for run_autonomous and resume_autonomous on ``ref``."""

    def build(extra: list[Any]) -> Agent:
        return Agent(model, instructions="monitor", tools=extra, session=ref)

    def rebuild(extra: list[Any], session_id: str) -> Agent:
        assert session_id == ref.session_id
        return Agent(model, instructions="monitor", tools=extra, session=ref)

    return build, rebuild


@pytest.fixture
async def ref(durable: DurableStore) -> Any:
    """A session on a fresh durable log (each test runs on SQLite and on PostgreSQL)."""
    async with durable.open() as log:
        yield SessionRef(log, "monitor", "ops", "disk-1")


class TestDeferAndResume:
    async def test_deferred_exit_keeps_the_wake_time_and_the_next_prompt(
        self, ref: SessionRef
    ) -> None:
        """A deferred exit's checkpoint holds next_wake_at and the model's next_prompt."""
        clock = FakeClock()
        model = ScriptedModel([schedule(300, "re-check db-1"), reply("sleeping")])
        build, _ = builders(model, ref)
        result = await run_autonomous(build, "watch", scheduler=ExitOnDeferScheduler(), clock=clock)
        cp = (await checkpoints(ref))[-1]
        assert (StopReason.DEFERRED, clock.now() + timedelta(seconds=300)) == (
            result.reason,
            result.next_wake_at,
        )
        assert ("deferred", result.next_wake_at, "re-check db-1") == (
            cp.stop_reason,
            cp.next_wake_at,
            cp.next_prompt,
        )

    async def test_resume_waits_for_the_wake_then_uses_the_stored_prompt(
        self, ref: SessionRef
    ) -> None:
        """Resuming a deferred session sleeps until the wake time, then prompts with next_prompt."""
        clock = FakeClock()
        model = ScriptedModel(
            [schedule(300, "re-check db-1"), reply("sleeping"), done("fine"), reply("bye")]
        )
        build, rebuild = builders(model, ref)
        first = await run_autonomous(build, "watch", scheduler=ExitOnDeferScheduler(), clock=clock)
        async with anyio.create_task_group() as tg:
            results: list[Any] = []

            async def resume() -> None:
                results.append(
                    await resume_autonomous(
                        rebuild, ref, clock=clock, scheduler=ExitOnDeferScheduler()
                    )
                )

            tg.start_soon(resume)
            await wait_until(lambda: clock.sleepers == 3)  # the wait, lease renewal, log watch
            assert 2 == model.requests  # asleep until the wake time: no model call yet
            clock.advance(300)
        result = results[0]
        users = [m["content"] for m in model.last_messages if m["role"] == "user"]
        assert (StopReason.COMPLETED, 2) == (result.reason, result.turns)
        assert ["watch", "re-check db-1"] == users
        assert first.input_tokens + 20 == result.input_tokens  # totals carried forward

    async def test_an_inject_ends_the_resume_wait_early(self, ref: SessionRef) -> None:
        """A message injected into a deferred session makes the resume start at once."""
        clock = FakeClock()
        model = ScriptedModel([schedule(3600), reply("zz"), done(), reply("ok")])
        build, rebuild = builders(model, ref)
        await run_autonomous(build, "watch", scheduler=ExitOnDeferScheduler(), clock=clock)
        await send_inject(ref.log, ref.key, "disk alert on db-2")
        with anyio.fail_after(5):
            result = await resume_autonomous(rebuild, ref, clock=clock)
        assert StopReason.COMPLETED == result.reason
        assert (
            "[Inbox]\n- disk alert on db-2\n\ncheck again"
            == [m["content"] for m in model.last_messages if m["role"] == "user"][-1]
        )

    async def test_a_completed_session_returns_at_once_without_build(self, ref: SessionRef) -> None:
        """Resuming a completed session returns its totals with no build and no model call."""
        model = ScriptedModel([done("all done"), reply("bye")])
        build, _ = builders(model, ref)
        first = await run_autonomous(build, "go")

        def never(extra: list[Any], session_id: str) -> Agent:
            raise AssertionError("build must not run")

        again = await resume_autonomous(never, ref)
        assert (StopReason.COMPLETED, first.turns, first.input_tokens, "all done") == (
            again.reason,
            again.turns,
            again.input_tokens,
            again.done_detail,
        )
        assert 2 == model.requests

    async def test_no_checkpoint_starts_at_turn_zero_on_the_existing_history(
        self, ref: SessionRef
    ) -> None:
        """A session with history but no checkpoint resumes at turn 0 with that history."""
        from eventlog import Event, UserMessage

        await ref.log.append([Event.create(ref.key, UserMessage("old question", 1))])
        model = ScriptedModel([done(), reply("ok")])
        _, rebuild = builders(model, ref)
        result = await resume_autonomous(rebuild, ref)
        assert (StopReason.COMPLETED, 1) == (result.reason, result.turns)


class TestLease:
    async def test_a_second_resumer_gets_session_locked(self, ref: SessionRef) -> None:
        """While one run holds the session, another resume raises SessionLocked naming it."""
        model = ScriptedModel(default=reply("working"))
        gate = anyio.Event()

        async def before(turn: int) -> None:
            await gate.wait()

        build, rebuild = builders(model, ref)
        async with start_autonomous(build, "go", before_turn=before) as h:
            await h.ready()
            with pytest.raises(SessionLocked) as info:
                await resume_autonomous(rebuild, ref)
            assert str(LeaseHolder.this_process().pid) in info.value.holder
            await h.stop()

    async def test_a_lost_lease_stops_the_run_and_writes_nothing_more(
        self, durable: DurableStore
    ) -> None:
        """When another process takes the session over, the run stops with lease_lost."""
        # Two clocks: the store's says when our lease expired, the run's when it renews. On
        # one clock the advance that expires the lease would also wake the renewal, which
        # would then race the takeover.
        store_clock, run_clock = FakeClock(), FakeClock()
        async with durable.open(clock=store_clock.now) as log:
            ref = SessionRef(log, "a", "u", "s")
            stalled = anyio.Event()

            async def stall(messages: object, tools: object) -> Any:
                stalled.set()
                await anyio.sleep_forever()

            build, _ = builders(ScriptedModel([stall]), ref)
            async with start_autonomous(build, "go", lease_ttl=30, clock=run_clock) as h:
                await stalled.wait()
                store_clock.advance(60)  # our lease expired; another holder takes it
                await log.acquire_lease(ref.key, LeaseHolder("elsewhere", 1, "t"), 60)
                run_clock.advance(10)  # our next renewal is due: it finds the lease taken
                with anyio.fail_after(5):
                    result = await h.wait()
            assert StopReason.LEASE_LOST == result.reason
            # Only the session's start record, written while the lease was ours.
            assert [(0, None)] == [(c.turns, c.stop_reason) for c in await checkpoints(ref)]


class TestDurableInbox:
    async def test_a_message_injected_while_no_run_is_delivered_once_on_resume(
        self, ref: SessionRef
    ) -> None:
        """An inject into a stopped session reaches the model once, on the next resume."""
        model = ScriptedModel([reply("turn one"), done(), reply("x"), done(), reply("y")])
        build, rebuild = builders(model, ref)
        await run_autonomous(build, "go", max_turns=1)
        await send_inject(ref.log, ref.key, "new priority")
        await resume_autonomous(rebuild, ref, max_turns=5)
        delivered = await ref.log.read(ref.key, kinds=[EventKind.INBOX_DELIVERED])
        assert 1 == len(delivered)
        users = [m["content"] for m in model.last_messages if m["role"] == "user"]
        assert ["go", "[Inbox]\n- new priority\n\ncontinue"] == users


class TestRemoteControl:
    async def test_remote_stop_pause_and_inject_reach_a_running_run(self, ref: SessionRef) -> None:
        """Control events another process writes to the log are obeyed by the run, each at
        the poll after it was written."""
        clock, model = FakeClock(), ScriptedModel(default=reply("working"))

        async def before(turn: int) -> None:
            await clock.sleep_until(clock.now() + timedelta(seconds=60))  # a turn a minute

        build, _ = builders(model, ref)
        async with start_autonomous(
            build, "go", before_turn=before, max_turns=0, control_poll=1, clock=clock
        ) as h:
            await asleep(clock, 3)  # the lease, the watch, and turn 1 before it begins
            await send_control(ref.log, ref.key, "pause")
            clock.advance(1)  # a poll reads the pause
            await asleep(clock, 3)
            clock.advance(59)  # turn 1 begins, and parks
            await wait_until(lambda: h.status == "paused")
            await send_inject(ref.log, ref.key, "from afar")
            await send_control(ref.log, ref.key, "resume")
            clock.advance(1)  # a poll reads both: turn 1 goes on, with the message
            await wait_until(
                lambda: any("from afar" in str(m["content"]) for m in model.last_messages)
            )
            await send_control(ref.log, ref.key, "stop")
            clock.advance(1)
            with anyio.fail_after(5):
                result = await h.wait()
        assert (StopReason.CONTEXT_CANCELLED, "stopped") == (result.reason, h.status)

    async def test_a_stop_sent_while_no_run_is_alive_sticks_until_a_forced_resume(
        self, ref: SessionRef
    ) -> None:
        """A stop left in the log while nobody runs the session keeps it stopped: a resume
        returns at once as stopped; a forced resume runs it, and obeys a new stop."""
        model = ScriptedModel(default=reply("working"))
        build, rebuild = builders(model, ref)
        await run_autonomous(build, "go", max_turns=1)
        await send_control(ref.log, ref.key, "stop")  # nobody is running
        calls = model.requests
        refused = await resume_autonomous(rebuild, ref, max_turns=0)
        assert (StopReason.CONTEXT_CANCELLED, 1, calls) == (
            refused.reason,
            refused.turns,
            model.requests,
        )
        summary = (await ref.log.sessions())[0]
        assert "context_cancelled" == summary.stop_reason
        polled, clock = anyio.Event(), FakeClock()

        async def before(turn: int) -> None:
            if turn == 4:
                polled.set()
            await clock.sleep_until(clock.now() + timedelta(seconds=3))  # three polls a turn

        result_box: list[Any] = []

        async def forced() -> None:
            result_box.append(
                await resume_autonomous(
                    rebuild,
                    ref,
                    force=True,
                    before_turn=before,
                    max_turns=0,
                    control_poll=1,
                    clock=clock,
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(forced)
            # A poll a second until two turns went by: the old stop was not obeyed (had it
            # been, the run would have ended and nothing would sleep on the clock again).
            await asleep(clock, 3)
            while not polled.is_set():
                clock.advance(1)
                await asleep(clock, 3)
            await send_control(ref.log, ref.key, "stop")
            clock.advance(1)
        (result,) = result_box
        assert StopReason.CONTEXT_CANCELLED == result.reason
        assert result.turns >= 3


class TestScheduling:
    async def test_sleep_scheduler_sleeps_until_the_wake_and_an_inject_wakes_it(self) -> None:
        """SleepScheduler sleeps on the clock; an inject ends the sleep early."""
        clock = FakeClock()
        model = ScriptedModel(
            [schedule(600), reply("zz"), schedule(600), reply("zz"), done(), reply("ok")]
        )
        async with start_autonomous(
            lambda extra: Agent(model, tools=extra),
            "watch",
            scheduler=SleepScheduler(clock=clock),
            clock=clock,
        ) as h:
            await h.ready()
            await wait_until(lambda: clock.sleepers == 1)
            clock.advance(600)  # the first sleep ends on time
            await wait_until(lambda: clock.sleepers == 1 and model.requests == 4)
            await h.inject("wake up")  # the second sleep ends early
            result = await h.wait()
        assert (StopReason.COMPLETED, 3) == (result.reason, result.turns)

    async def test_schedule_tool_rejections_go_back_to_the_model(self) -> None:
        """Bad schedule arguments are answered with rejected: reasons, never raised."""
        bad: list[dict[str, Any]] = [
            {},
            {"wake_in_sec": 5, "wake_at": "2030-01-01T00:00:00Z"},
            {"wake_in_sec": 0},
            {"wake_at": "tomorrow"},
            {"wake_in_sec": 7200},
        ]
        model = ScriptedModel([*[call("schedule_next_turn", b) for b in bad], done(), reply("ok")])
        await run_autonomous(
            lambda extra: Agent(model, tools=extra),
            "go",
            scheduler=ExitOnDeferScheduler(),
            schedule_tool_max_defer=3600,
            clock=FakeClock(),
        )
        answers = [m["content"] for m in model.last_messages if m["role"] == "tool"][: len(bad)]
        assert all(a.startswith("rejected: ") for a in answers), answers
        assert "past the maximum of 3600 s" in answers[-1]

    async def test_max_defer_clamps_silently(self) -> None:
        """The driver's max_defer clamps the wake time without telling the model."""
        clock = FakeClock()
        model = ScriptedModel([schedule(7200), reply("zz")])
        result = await run_autonomous(
            lambda extra: Agent(model, tools=extra),
            "go",
            scheduler=ExitOnDeferScheduler(),
            max_defer=60,
            clock=clock,
        )
        assert clock.now() + timedelta(seconds=60) == result.next_wake_at

    async def test_done_beats_schedule_in_the_same_turn(self) -> None:
        """A turn that both schedules and finishes completes the run."""
        from autonomous.testing import calls

        model = ScriptedModel(
            [
                calls(
                    [
                        ("schedule_next_turn", {"wake_in_sec": 60}),
                        ("report_done", {"state": "done"}),
                    ]
                ),
                reply("ok"),
            ]
        )
        result = await run_autonomous(
            lambda extra: Agent(model, tools=extra),
            "go",
            scheduler=ExitOnDeferScheduler(),
            clock=FakeClock(),
        )
        assert StopReason.COMPLETED == result.reason

    async def test_due_sessions_lists_a_deferred_session_once_due(self, ref: SessionRef) -> None:
        """A deferred session is due at its wake time, found by the log's index."""
        clock = FakeClock()
        model = ScriptedModel([schedule(300), reply("zz")])
        build, _ = builders(model, ref)
        await run_autonomous(build, "watch", scheduler=ExitOnDeferScheduler(), clock=clock)
        assert [] == await ref.log.due_sessions(clock.now())
        due = await ref.log.due_sessions(clock.now() + timedelta(seconds=300))
        assert [ref.key] == [s.key for s in due]


class TestHistoryWindow:
    async def test_only_recent_turns_are_sent_and_the_goal_is_kept(self) -> None:
        """With a sliding window of 2 the model sees two turns, the system prompt unchanged,
        and the goal in a message of its own after it."""
        model = ScriptedModel([reply(f"answer {i}") for i in range(5)] + [done(), reply("ok")])
        await run_autonomous(
            lambda extra: Agent(model, instructions="sys", tools=extra),
            "the goal",
            history_turns=2,
            history="sliding",
        )
        users = [m["content"] for m in model.last_messages[2:] if m["role"] == "user"]
        assert ["continue", "continue"] == users
        assert {"role": "system", "content": "sys"} == model.last_messages[0]
        assert model.last_messages[1]["content"].startswith("[Goal of this run] the goal")

    async def test_a_resume_loads_only_the_window(self, ref: SessionRef) -> None:
        """A resume with history_turns reads only the newest turns back."""
        model = ScriptedModel([reply(f"answer {i}") for i in range(6)] + [done(), reply("ok")])
        build, rebuild = builders(model, ref)
        await run_autonomous(build, "the goal", max_turns=6)
        await resume_autonomous(rebuild, ref, max_turns=10, history_turns=3, history="sliding")
        assistants = [m["content"] for m in model.last_messages if m["role"] == "assistant"]
        assert ["answer 4", "answer 5"] == assistants[:2]
        assert "the goal" in model.last_messages[1]["content"]

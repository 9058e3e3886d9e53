"""AutonomousHandle: ready, inject, pause, resume, stop, wait, status, events, threads."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from autonomous import (
    Agent,
    AutonomousStatus,
    BuildError,
    ConfigurationError,
    RunFinished,
    StopReason,
    Tool,
    start_autonomous,
)
from autonomous.testing import ScriptedModel, done, reply
from eventlog import Control, EventKind, InboxQueued, SessionRef
from permissions import Caller

from .helpers import builder, payloads
from .stores import DurableStore

pytestmark = pytest.mark.anyio


class Gatekeeper:
    """A model step that blocks until released, so tests can act while a turn is in flight."""

    def __init__(self, answer: Any) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.answer = answer

    async def __call__(self, messages: object, tools: object) -> Any:
        self.entered.set()
        await self.release.wait()
        return self.answer


class TestReady:
    async def test_ready_raises_the_build_error_instead_of_hanging(self) -> None:
        """ready() and wait() raise a failed build; leaving the block does not raise again."""

        def build(extra: list[Tool]) -> Agent:
            raise RuntimeError("no credentials")

        async with start_autonomous(build, "go") as h:
            with pytest.raises(BuildError, match="no credentials"):
                await h.ready()
            with pytest.raises(BuildError):
                await h.wait()
        assert AutonomousStatus.FAILED == h.status

    async def test_async_build_is_awaited(self) -> None:
        """An async build function works like a sync one."""
        model = ScriptedModel([done(), reply("ok")])

        async def build(extra: list[Any]) -> Any:
            return builder(model)(extra)

        async with start_autonomous(build, "go") as h:
            await h.ready()
            result = await h.wait()
        assert StopReason.COMPLETED == result.reason


class TestPauseResume:
    async def test_pause_reports_paused_once_the_loop_has_parked(
        self, durable_ref: SessionRef
    ) -> None:
        """pause() returns after the running turn ends and the loop parks; resume goes on; both
        are in the durable log."""
        step = Gatekeeper(reply("turn one"))
        last = Gatekeeper(done())  # holds the run open until both resumes were made
        ref = durable_ref
        model = ScriptedModel([step, last, reply("ok")])
        async with start_autonomous(builder(model, session=ref), "go") as h:
            await h.ready()
            await step.entered.wait()
            async with anyio.create_task_group() as tg:
                tg.start_soon(h.pause)
                await anyio.wait_all_tasks_blocked()
                assert AutonomousStatus.RUNNING == h.status  # the turn is still in flight
                step.release.set()
            assert AutonomousStatus.PAUSED == h.status
            assert 1 == model.requests
            await h.pause()  # idempotent
            await h.resume()
            await h.resume()  # idempotent
            last.release.set()
            result = await h.wait()
        assert StopReason.COMPLETED == result.reason
        notes = [c.action for c in await payloads(ref, EventKind.CONTROL, Control)]
        assert ["pause", "resume"] == notes

    async def test_pause_resume_and_inject_after_the_end_raise(self) -> None:
        """A finished run refuses pause, resume and inject; stop stays a no-op."""
        model = ScriptedModel([done(), reply("ok")])
        async with start_autonomous(builder(model), "go") as h:
            await h.wait()
            for call in (h.pause, h.resume):
                with pytest.raises(RunFinished):
                    await call()
            with pytest.raises(RunFinished):
                await h.inject("late")
            await h.stop()
        assert AutonomousStatus.COMPLETED == h.status


class TestStop:
    async def test_stop_cancels_an_in_flight_model_call(self) -> None:
        """stop() cancels the hung model call and returns once the loop unwound."""
        step = Gatekeeper(reply("never"))
        model = ScriptedModel([step])
        async with start_autonomous(builder(model), "go") as h:
            await step.entered.wait()
            await h.stop()
            assert AutonomousStatus.STOPPED == h.status
            result = await h.wait()
            await h.stop()  # idempotent
        assert StopReason.CONTEXT_CANCELLED == result.reason

    async def test_leaving_the_block_stops_a_running_run(self) -> None:
        """Leaving the async-with block stops the run like Go's defer h.Stop()."""
        step = Gatekeeper(reply("never"))
        async with start_autonomous(builder(ScriptedModel([step])), "go") as h:
            await step.entered.wait()
        assert AutonomousStatus.STOPPED == h.status
        assert StopReason.CONTEXT_CANCELLED == (await h.wait()).reason

    async def test_stop_while_paused_unparks_and_ends(self) -> None:
        """A paused run stops cleanly."""
        model = ScriptedModel([reply("a"), done(), reply("b")])
        async with start_autonomous(builder(model), "go") as h:
            await h.pause()
            await h.stop()
        assert StopReason.CONTEXT_CANCELLED == (await h.wait()).reason


class TestInject:
    async def test_inject_is_in_the_log_before_it_returns(
        self, durable: DurableStore, durable_ref: SessionRef
    ) -> None:
        """inject_as appends an inbox_queued event naming the caller before returning: another
        log on the same store reads it."""
        ref = durable_ref
        step = Gatekeeper(reply("a"))
        model = ScriptedModel([step, done(), reply("b")])
        async with start_autonomous(builder(model, session=ref), "go") as h:
            await h.ready()
            await h.inject_as("focus on Q4", Caller(identity="alice", admin=True))
            async with durable.open() as other:
                queued = await other.read(ref.key, kinds=[EventKind.INBOX_QUEUED])
            payload = queued[0].payload
            assert isinstance(payload, InboxQueued) and payload.caller is not None
            assert ("focus on Q4", "alice", True) == (
                payload.text,
                payload.caller.identity,
                payload.caller.admin,
            )
            step.release.set()
            await h.wait()
        users = [m["content"] for m in model.last_messages if m["role"] == "user"]
        assert "[Inbox]\n- (from alice) focus on Q4\n\ncontinue" == users[-1]

    async def test_blank_inject_is_refused(self) -> None:
        """A blank message is a ConfigurationError."""
        async with start_autonomous(builder(ScriptedModel([done(), reply("x")])), "go") as h:
            with pytest.raises(ConfigurationError):
                await h.inject("   ")

    async def test_inject_from_another_thread(self) -> None:
        """A worker thread can inject through anyio.from_thread and request a wake directly."""
        step = Gatekeeper(reply("a"))
        model = ScriptedModel([step, done(), reply("b")])
        async with start_autonomous(builder(model), "go") as h:
            await h.ready()

            def worker() -> int:
                anyio.from_thread.run(h.inject, "from a thread")
                h.request_wake()
                return threading.get_ident()

            ident = await anyio.to_thread.run_sync(worker)
            assert ident != threading.get_ident()
            step.release.set()
            await h.wait()
        assert (
            "from a thread"
            in [m["content"] for m in model.last_messages if m["role"] == "user"][-1]
        )


class TestEvents:
    async def test_progress_stream_and_callback_see_the_run(self) -> None:
        """The handle's event stream and the progress callback get typed events."""
        from autonomous import ModelCalled, RunExited, TurnStarted

        seen: list[str] = []
        step = Gatekeeper(reply("a"))
        model = ScriptedModel([step, done(), reply("b")])
        async with start_autonomous(
            builder(model), "go", progress=lambda turn, ev: seen.append(type(ev).__name__)
        ) as h:
            stream = h.events()
            step.release.set()
            got = [type(ev) async for ev in stream]
        assert TurnStarted in got and ModelCalled in got and RunExited == got[-1]
        assert "RunExited" == seen[-1]

    async def test_a_failing_progress_callback_never_breaks_the_loop(self) -> None:
        """A callback that raises is ignored."""

        def bad(turn: int, event: object) -> None:
            raise ValueError("consumer bug")

        async with start_autonomous(
            builder(ScriptedModel([done(), reply("x")])), "go", progress=bad
        ) as h:
            assert StopReason.COMPLETED == (await h.wait()).reason

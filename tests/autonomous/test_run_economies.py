"""Specification of the per-run shortcuts: each one gives what the long way gave."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Self

import anyio
import pytest
import structlog

from autonomous import (
    Agent,
    AutonomousStatus,
    BuildError,
    ConfigurationError,
    StopReason,
    run_autonomous,
    send_control,
    start_autonomous,
)
from autonomous._model import Model
from autonomous._options import make_options
from autonomous.testing import FakeClock, ScriptedModel, done, reply
from eventlog import Checkpoint, Event, Lease, LeaseHolder, SessionRef

from .helpers import builder, checkpoints, memory_session
from .stores import DurableLog, DurableStore

pytestmark = pytest.mark.anyio


class TestWaitingForTheEnd:
    """Every waiter for the run's end (ready, wait, stop) wakes once, whenever it came."""

    async def test_every_waiter_wakes_at_the_end(self) -> None:
        """Tasks waiting on wait() all return the result once the run ends."""
        gate, woke = anyio.Event(), []

        async def blocked(messages: object, tools: object) -> Any:
            await gate.wait()
            return done("ok")

        async with start_autonomous(builder(ScriptedModel([blocked])), "go") as handle:

            async def waiter(n: int) -> None:
                woke.append((n, (await handle.wait()).reason))

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(waiter, n)
                await anyio.wait_all_tasks_blocked()
                assert [] == woke
                gate.set()
        assert [(n, StopReason.COMPLETED) for n in range(3)] == sorted(woke)

    async def test_waiting_after_the_end_returns_at_once(self) -> None:
        """Once the run ended, ready(), wait() and stop() return at once, again and again."""
        async with start_autonomous(builder(ScriptedModel([done("ok")])), "go") as handle:
            first = await handle.wait()
            with anyio.fail_after(1):
                await handle.ready()
                await handle.stop()
                await handle.stop()
                assert first == await handle.wait()
        assert AutonomousStatus.COMPLETED == handle.status

    async def test_a_cancelled_waiter_leaves_the_others_waking(self) -> None:
        """A waiter cancelled before the end does not keep a later waiter from waking."""
        gate, woke = anyio.Event(), []

        async def blocked(messages: object, tools: object) -> Any:
            await gate.wait()
            return done("ok")

        async with start_autonomous(builder(ScriptedModel([blocked])), "go") as handle:
            with anyio.CancelScope() as scope:
                scope.cancel()
                await handle.wait()
            assert scope.cancelled_caught

            async def waiter() -> None:
                await handle.wait()
                woke.append(True)

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()
                gate.set()
        assert [True] == woke


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
        """An error in the block comes out of it as itself, once the run is stopped."""
        gate = anyio.Event()

        async def blocked(messages: object, tools: object) -> Any:
            await gate.wait()
            return reply("late")

        started = start_autonomous(builder(ScriptedModel([blocked])), "go", max_turns=1)
        with pytest.raises(LookupError, match="from the body"):
            async with started as handle:
                await handle.ready()
                raise LookupError("from the body")
        assert AutonomousStatus.STOPPED == handle.status
        assert StopReason.CONTEXT_CANCELLED == (await handle.wait()).reason

    async def test_the_callers_cancellation_stops_the_run_and_goes_on(self) -> None:
        """A deadline around the block cancels the block; the run is stopped, its final
        checkpoint written, and the cancellation goes on out of the block."""
        ref = memory_session()
        started_call = anyio.Event()

        async def hang(messages: object, tools: object) -> Any:
            started_call.set()
            await anyio.sleep_forever()

        model = ScriptedModel([hang])
        with anyio.move_on_after(5) as scope:
            async with start_autonomous(builder(model, session=ref), "go") as handle:
                await started_call.wait()
                scope.cancel()
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        assert AutonomousStatus.STOPPED == handle.status
        assert "context_cancelled" == (await checkpoints(ref))[-1].stop_reason

    async def test_the_runs_task_has_ended_when_the_block_is_left(self) -> None:
        """Leaving the block waits for the run's task itself, not only for its result: the
        run's last work (its final checkpoint) is done by then."""
        ref = memory_session()

        async def slow(messages: object, tools: object) -> Any:
            await anyio.sleep_forever()

        model = ScriptedModel([slow])
        async with start_autonomous(builder(model, session=ref), "go", max_turns=1) as h:
            await h.ready()
        assert ["context_cancelled"] == [c.stop_reason for c in await checkpoints(ref)]
        assert StopReason.CONTEXT_CANCELLED == (await h.wait()).reason

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
    @pytest.mark.parametrize(
        "value",
        [
            ScriptedModel(),
            _Full(),
            _NamedOnly(),
            _CompleteIsNone(),
            _FullButCompleteRemoved(),
            object(),
            None,
        ],
    )
    def test_it_agrees_with_isinstance(self, value: object) -> None:
        """An Agent takes as its model what ``isinstance(value, Model)`` accepts, no more."""
        try:
            Agent(value)  # type: ignore[arg-type]
        except ConfigurationError:
            accepted = False
        else:
            accepted = True
        assert isinstance(value, Model) == accepted


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
        expected = "['autonomous.turn', 'chat scripted', 'invoke_agent agent']"
        assert expected == _last_line(code)


class _CountingLog:
    """A durable log (either store) that counts its lease calls and reads and tells when the
    lease is renewed; every other attribute is the store's own."""

    durable = True

    def __init__(self, inner: DurableLog) -> None:
        self.inner = inner
        self.renewed = anyio.Event()
        self.renewing = anyio.Event()
        self.calls: list[str] = []
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, *args: Any, **kwargs: Any) -> list[Event]:
        self.reads += 1
        events: list[Event] = await self.inner.read(*args, **kwargs)
        return events

    async def __aenter__(self) -> Self:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.inner.aclose()

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        self.calls.append("renew")
        self.renewing.set()
        renewed = await self.inner.renew_lease(lease, ttl)
        self.renewed.set()
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        self.calls.append("release")
        await self.inner.release_lease(lease)

    async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
        self.calls.append("append_and_release")
        return await self.inner.append_and_release(events, lease)


class _ProtocolOnly:
    """A durable store written to the EventLog protocol before append_and_release and watch
    were members of it (neither of the two, not subclassing it)."""

    durable = True

    def __init__(self, inner: _CountingLog) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("append_and_release", "watch"):
            raise AttributeError(name)
        return getattr(self.inner, name)


class TestKeeper:
    """What a durable run's keeper does for it: hold the lease and obey other processes,
    from the run's start to its end, and nothing after."""

    async def test_a_durable_run_holds_its_lease_and_obeys_remote_control_from_its_start(
        self, durable: DurableStore
    ) -> None:
        """During its first model call a durable run holds its session's lease, and a stop
        sent from elsewhere ends it (read by its watch); afterwards the session is free."""
        clock = FakeClock()
        async with durable.open() as log:
            ref = SessionRef(log, "a", "u", "s")
            holders: list[str | None] = []

            async def stopped_from_elsewhere(messages: object, tools: object) -> Any:
                holders.extend(summary.holder for summary in await log.sessions())
                await send_control(log, ref.key, "stop")
                clock.advance(60)  # the watch's first poll, for a store that does not notify
                await anyio.sleep_forever()

            model = ScriptedModel([stopped_from_elsewhere])
            with anyio.fail_after(10):
                result = await run_autonomous(
                    builder(model, session=ref), "go", max_turns=1, control_poll=60, clock=clock
                )
            assert StopReason.CONTEXT_CANCELLED == result.reason
            assert [True] == [holder is not None for holder in holders]
            await log.acquire_lease(ref.key, LeaseHolder("elsewhere", 1, "t"), 60)

    async def test_a_run_without_a_durable_session_takes_no_lease_and_watches_nothing(
        self,
    ) -> None:
        """A run on an in-memory session holds no lease, and a stop appended to its log by
        another writer is not read: the run goes on to its own end."""
        clock = FakeClock()
        ref = memory_session()

        async def stopped_from_elsewhere(messages: object, tools: object) -> Any:
            # Free to any other holder: this raises if the run held the lease.
            lease = await ref.log.acquire_lease(ref.key, LeaseHolder("elsewhere", 1, "t"), 60)
            await ref.log.release_lease(lease)
            await send_control(ref.log, ref.key, "stop")
            clock.advance(3600)
            await anyio.wait_all_tasks_blocked()
            return reply("done")

        model = ScriptedModel([stopped_from_elsewhere])
        result = await run_autonomous(
            builder(model, session=ref), "go", max_turns=1, control_poll=60, clock=clock
        )
        assert StopReason.MAX_TURNS_EXCEEDED == result.reason

    async def test_the_lease_is_renewed_on_time_and_stopping_ends_renewals_and_polls(
        self, durable: DurableStore
    ) -> None:
        """With a third of lease_ttl much shorter than control_poll, the lease is renewed
        a third of lease_ttl in (on the run's clock), long before the first poll; once the
        run is stopped nothing renews or reads any more, and the lease is released."""
        stalled, clock = anyio.Event(), FakeClock()

        async def stall(messages: object, tools: object) -> Any:
            stalled.set()
            await anyio.sleep_forever()

        async with _CountingLog(durable.open()) as log:
            ref = SessionRef(log, "a", "u", "s")
            model = ScriptedModel([stall])
            async with start_autonomous(
                builder(model, session=ref), "go", lease_ttl=30, control_poll=3600, clock=clock
            ) as h:
                await stalled.wait()
                clock.advance(9)
                await anyio.wait_all_tasks_blocked()
                assert [] == log.calls  # not yet: the first renewal is due at 10 s
                clock.advance(1)
                with anyio.fail_after(5):
                    await log.renewed.wait()
                await h.stop()
            assert StopReason.CONTEXT_CANCELLED == (await h.wait()).reason
            calls, reads = list(log.calls), log.reads
            clock.advance(2 * 3600)  # many renewals and polls, were anything left to make them
            await anyio.wait_all_tasks_blocked()
            assert (calls, reads) == (log.calls, log.reads)
            # Released: another holder takes the session at once.
            await log.acquire_lease(ref.key, LeaseHolder("elsewhere", 1, "t"), 60)


class TestLastWrite:
    async def test_the_final_checkpoint_takes_the_lease_with_it(
        self, durable: DurableStore
    ) -> None:
        """A durable run's final checkpoint and the lease's release are one store call, and
        the session is free once the run returns."""
        async with _CountingLog(durable.open()) as log:
            ref = SessionRef(log, "a", "u", "s")
            model = ScriptedModel([reply("one"), done("finished")])
            result = await run_autonomous(builder(model, session=ref), "go")
            assert StopReason.COMPLETED == result.reason
            assert ["append_and_release"] == log.calls
            last = (await log.read(ref.key))[-1].payload
            assert isinstance(last, Checkpoint) and "completed" == last.stop_reason
            await log.acquire_lease(ref.key, LeaseHolder("elsewhere", 1, "t"), 60)

    async def test_a_store_without_it_gets_the_append_then_the_release(
        self, durable: DurableStore
    ) -> None:
        """A store written to the protocol before append_and_release and watch joined it
        still runs: its final checkpoint is appended, then the lease released, and its
        session is watched by the poll alone."""
        async with _CountingLog(durable.open()) as log:
            ref = SessionRef(_ProtocolOnly(log), "a", "u", "s")
            model = ScriptedModel([done("finished")])
            result = await run_autonomous(builder(model, session=ref), "go")
            assert StopReason.COMPLETED == result.reason
            assert ["release"] == log.calls
            last = await log.latest_checkpoint(ref.key)
            assert last is not None and isinstance(last.payload, Checkpoint)
            assert "completed" == last.payload.stop_reason
            await log.acquire_lease(ref.key, LeaseHolder("elsewhere", 1, "t"), 60)

    async def test_a_renewal_after_our_own_release_is_not_a_lost_lease(
        self, durable: DurableStore
    ) -> None:
        """The heartbeat renewing just after the final checkpoint dropped the lease finds it
        gone; that is the run's own release, not a takeover: the run completes."""

        clock = FakeClock()

        class _Slow(_CountingLog):
            def __init__(self, inner: DurableLog) -> None:
                super().__init__(inner)
                self.answered = anyio.Event()

            async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
                try:
                    return await super().renew_lease(lease, ttl)
                finally:  # the heartbeat handles the answer before anything else runs
                    self.answered.set()

            async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
                seqs = await super().append_and_release(events, lease)
                self.answered = anyio.Event()
                clock.advance(10)  # the heartbeat's renewal falls due meanwhile
                # Wait for the store's answer, not only the call: the run must not end (and
                # cancel the heartbeat) before the heartbeat has heard the lease is gone.
                with anyio.fail_after(5):
                    await self.answered.wait()
                return seqs

        async with _Slow(durable.open()) as log:
            ref = SessionRef(log, "a", "u", "s")
            model = ScriptedModel([done("finished")])
            with structlog.testing.capture_logs() as logs:
                result = await run_autonomous(
                    builder(model, session=ref),
                    "go",
                    lease_ttl=30,
                    control_poll=3600,
                    clock=clock,
                )
            assert StopReason.COMPLETED == result.reason
            assert "lease_lost" not in [entry["event"] for entry in logs]

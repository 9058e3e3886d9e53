"""The clocks: timeouts on the clock, so fake time drives the runtime's timeouts too."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from scheduler import Clock, FakeClock, SystemClock

pytestmark = pytest.mark.anyio


class TestFakeClockTimeouts:
    async def test_a_scope_is_cancelled_when_time_passes_its_deadline(self) -> None:
        """advance() past the deadline cancels the scope's body, at no real cost."""
        clock = FakeClock()
        hung = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def body() -> None:
                with clock.move_on_after(30) as scope:
                    await hung.wait()
                results.append(scope.cancelled_caught)

            results: list[bool] = []
            tg.start_soon(body)
            await anyio.wait_all_tasks_blocked()
            clock.advance(29.9)
            await anyio.wait_all_tasks_blocked()
            assert [] == results
            clock.advance(0.1)
        assert [True] == results

    async def test_a_body_that_finishes_in_time_is_left_alone(self) -> None:
        """A scope left before its deadline is not cancelled later, and is forgotten."""
        clock = FakeClock()
        with clock.move_on_after(5) as scope:
            await anyio.lowlevel.checkpoint()
        clock.advance(10)
        assert (False, False) == (scope.cancel_called, scope.cancelled_caught)

    async def test_none_means_no_deadline(self) -> None:
        """move_on_after(None) never cancels, however far time moves."""
        clock = FakeClock()
        with clock.move_on_after(None) as scope:
            clock.advance(1e9)
            await anyio.lowlevel.checkpoint()
        assert not scope.cancelled_caught

    async def test_a_deadline_already_reached_cancels_at_the_first_checkpoint(self) -> None:
        """A zero timeout cancels at once, as anyio.move_on_after(0) does."""
        with FakeClock().move_on_after(0) as scope:
            await anyio.lowlevel.checkpoint()
        assert scope.cancelled_caught

    async def test_autojump_sleeps_run_into_the_timeout(self) -> None:
        """With autojump a sleep past the deadline jumps time there, and the scope fires."""
        clock = FakeClock(autojump=True)
        with clock.move_on_after(1) as scope:
            await clock.sleep_until(clock.now().replace(year=clock.now().year + 1))
        assert scope.cancelled_caught


class TestProtocol:
    @pytest.mark.parametrize("clock", [SystemClock(), FakeClock()])
    def test_both_clocks_are_clocks(self, clock: Clock) -> None:
        """The real and the fake clock implement the whole Clock protocol."""
        assert isinstance(clock, Clock)

    async def test_the_system_clock_times_out_in_real_time(self) -> None:
        """SystemClock.move_on_after is anyio's: a short real timeout fires."""
        with SystemClock().move_on_after(0.01) as scope:
            await anyio.sleep(5)
        assert scope.cancelled_caught


class TestSleepsAreCancellationPoints:
    @pytest.mark.parametrize("clock", [SystemClock(), FakeClock(), FakeClock(autojump=True)])
    async def test_a_sleep_already_due_still_obeys_a_cancel(self, clock: Clock) -> None:
        """sleep_until a time already past is a cancellation point: a cancelled caller stops
        there, never runs on past it (a loop of due sleeps could not be cancelled else)."""
        went_on = False
        with anyio.CancelScope() as scope:
            scope.cancel()
            await clock.sleep_until(clock.now() - timedelta(seconds=1))
            went_on = True
        assert (True, False) == (scope.cancelled_caught, went_on)


class TestAutojump:
    """``FakeClock(autojump=True)``: time jumps to the next deadline once every task is blocked,
    as trio's ``MockClock`` does with an autojump threshold of 0."""

    async def test_time_stands_still_while_another_task_can_run(self) -> None:
        """A sleeper does not jump while another task still has work: that task sees the
        time of its start throughout, and the sleeper wakes at its deadline after it."""
        clock = FakeClock(autojump=True)
        seen: list[float] = []
        woke: list[float] = []

        async def sleeper() -> None:
            await clock.sleep_until(clock.now() + timedelta(seconds=10))
            woke.append(clock.monotonic())

        async def worker() -> None:
            for _ in range(50):
                seen.append(clock.monotonic())
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            tg.start_soon(worker)
        assert ([0.0] * 50, [10.0]) == (seen, woke)

    async def test_sleepers_wake_in_deadline_order_each_at_its_time(self) -> None:
        """Two sleepers: time jumps to the nearer deadline first, then to the other."""
        clock = FakeClock(autojump=True)
        woke: list[tuple[str, float]] = []

        async def sleep(name: str, seconds: float) -> None:
            await clock.sleep_until(clock.now() + timedelta(seconds=seconds))
            woke.append((name, clock.monotonic()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleep, "late", 5)
            tg.start_soon(sleep, "early", 3)
        assert [("early", 3.0), ("late", 5.0)] == woke

    async def test_a_task_waiting_for_an_event_does_not_hold_time(self) -> None:
        """A task blocked on something other than the clock counts as blocked: the sleeper
        jumps, and what it sets wakes the waiter."""
        clock = FakeClock(autojump=True)
        ready = anyio.Event()
        woke: list[float] = []

        async def waiter() -> None:
            await ready.wait()
            woke.append(clock.monotonic())

        async def sleeper() -> None:
            await clock.sleep_until(clock.now() + timedelta(hours=1))
            ready.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            tg.start_soon(sleeper)
        assert [3600.0] == woke

    async def test_advance_still_wakes_an_autojump_sleeper(self) -> None:
        """advance() works on an autojumping clock as on any other."""
        clock = FakeClock(autojump=True)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(clock.sleep_until, clock.now() + timedelta(seconds=30))
                await anyio.lowlevel.checkpoint()
                clock.advance(30)
        assert 30.0 == clock.monotonic()

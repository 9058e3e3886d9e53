"""Runs started the way user programs start them: a plain ``asyncio.run(main())``.

The anyio pytest plugin runs every other async test inside ``anyio.run``, which sets anyio's
notion of the running library for the whole thread; code that only works there (anyio calls
from loop callbacks) passes under the plugin and breaks in users' programs. Each test here
runs its own loop and fails when that loop reports an exception to its handler.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import anyio

from autonomous import (
    Agent,
    AutonomousStatus,
    StopReason,
    run_autonomous,
    send_control,
    send_inject,
    start_autonomous,
)
from autonomous.testing import FakeClock, ScriptedModel, call, done, reply
from eventlog import SessionRef
from scheduler import SleepScheduler

from ..support.litellm_http import wait_until
from .helpers import builder
from .stores import DurableStore

_PATIENCE = 20.0  # seconds a condition may take on a loaded machine; the usual case is ms


def run_plain(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``asyncio.run(main())``, failing when the loop's exception handler was called."""
    reported: list[dict[str, Any]] = []

    async def guarded() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx))
        await main()

    asyncio.run(guarded())
    assert [] == [ctx.get("message") for ctx in reported]


def lease_expiry(durable: DurableStore) -> datetime | None:
    """The session lease's expiry as the store wrote it (None: no lease)."""
    rows = durable.execute("SELECT expires_at FROM {sessions} WHERE expires_at IS NOT NULL")
    if not rows:
        return None
    ((expiry,),) = rows
    return expiry if isinstance(expiry, datetime) else datetime.fromisoformat(str(expiry))


def renewed_to(durable: DurableStore, expiry: datetime) -> bool:
    """Whether the lease was renewed to expire at ``expiry`` or later."""
    current = lease_expiry(durable)
    return current is not None and current >= expiry


def users(model: ScriptedModel) -> list[str]:
    """The user messages the model saw last."""
    return [str(m["content"]) for m in model.last_messages if m["role"] == "user"]


def durable_builder(model: ScriptedModel, ref: SessionRef) -> Callable[[list[Any]], Agent]:
    """A build function for an agent on ``ref``."""
    return lambda extra: Agent(model, instructions="monitor", tools=extra, session=ref)


async def paced(turn: int) -> None:
    """A before_turn hook that lets a few milliseconds pass between turns (no busy loop)."""
    await anyio.sleep(0.01)


class TestDurableRunUnderAsyncioRun:
    def test_remote_control_is_obeyed_and_the_lease_renewed_on_the_system_clock(
        self, durable: DurableStore
    ) -> None:
        """With the default clock, a run started by asyncio.run renews its lease and obeys
        a remote pause, inject, resume and stop."""
        model = ScriptedModel(default=reply("working"))

        async def main() -> None:
            async with durable.open() as log:
                ref = SessionRef(log, "a", "u", "s")
                async with start_autonomous(
                    durable_builder(model, ref),
                    "go",
                    before_turn=paced,
                    max_turns=0,
                    control_poll=0.02,
                    lease_ttl=0.6,
                ) as h:
                    await h.ready()
                    first = lease_expiry(durable)
                    assert first is not None, "a durable run holds its session's lease"
                    await wait_until(lambda: lease_expiry(durable) != first, within=_PATIENCE)
                    await send_control(log, ref.key, "pause")
                    await wait_until(lambda: h.status == "paused", within=_PATIENCE)
                    await send_inject(log, ref.key, "from afar")
                    await send_control(log, ref.key, "resume")
                    await wait_until(
                        lambda: any("from afar" in u for u in users(model)), within=_PATIENCE
                    )
                    await send_control(log, ref.key, "stop")
                    with anyio.fail_after(_PATIENCE):
                        result = await h.wait()
                assert (StopReason.CONTEXT_CANCELLED, "stopped") == (result.reason, h.status)

        run_plain(main)

    def test_the_keeper_sleeps_on_the_runs_clock(self, durable: DurableStore) -> None:
        """On a FakeClock, the lease is renewed and the log watched as the clock is advanced,
        past the first lease's expiry, and a remote stop lands."""
        clock = FakeClock()
        model = ScriptedModel(default=reply("working"))
        ttl = 3.0

        async def main() -> None:
            async with durable.open(clock=clock.now) as log:
                ref = SessionRef(log, "a", "u", "s")
                async with start_autonomous(
                    durable_builder(model, ref),
                    "go",
                    before_turn=paced,
                    max_turns=0,
                    clock=clock,
                    control_poll=0.5,
                    lease_ttl=ttl,
                ) as h:
                    await h.ready()
                    for _ in range(4):  # 4 s in all: the first lease would have expired
                        clock.advance(ttl / 3)
                        expiry = clock.now() + timedelta(seconds=ttl)
                        await wait_until(partial(renewed_to, durable, expiry), within=_PATIENCE)
                    await send_inject(log, ref.key, "from afar")
                    clock.advance(0.5)
                    await wait_until(
                        lambda: any("from afar" in u for u in users(model)), within=_PATIENCE
                    )
                    await send_control(log, ref.key, "stop")
                    clock.advance(0.5)
                    with anyio.fail_after(_PATIENCE):
                        result = await h.wait()
                assert StopReason.CONTEXT_CANCELLED == result.reason

        run_plain(main)


class TestInMemoryRunsUnderAsyncioRun:
    def test_run_autonomous_completes(self) -> None:
        """run_autonomous with a ScriptedModel completes under a plain asyncio.run."""
        model = ScriptedModel([reply("thinking"), done("finished"), reply("bye")])
        results: list[Any] = []

        async def main() -> None:
            results.append(await run_autonomous(builder(model), "go", max_turns=5))

        run_plain(main)
        assert (StopReason.COMPLETED, "finished") == (results[0].reason, results[0].done_detail)

    def test_a_handle_is_injected_paused_resumed_and_stopped(self) -> None:
        """start_autonomous's handle: inject reaches the model, pause parks, resume goes on,
        stop ends the run."""
        model = ScriptedModel(default=reply("working"))

        async def main() -> None:
            async with start_autonomous(builder(model), "go", before_turn=paced, max_turns=0) as h:
                await h.ready()
                await h.inject("hello")
                await wait_until(lambda: any("hello" in u for u in users(model)), within=_PATIENCE)
                await h.pause()
                await wait_until(lambda: h.status == AutonomousStatus.PAUSED, within=_PATIENCE)
                seen = len(model.last_messages)
                await h.resume()
                await wait_until(lambda: len(model.last_messages) > seen, within=_PATIENCE)
                await h.stop()
                result = await h.wait()
            assert (StopReason.CONTEXT_CANCELLED, AutonomousStatus.STOPPED) == (
                result.reason,
                h.status,
            )

        run_plain(main)

    def test_a_wake_requested_from_another_thread_ends_a_sleep(self) -> None:
        """request_wake from a plain thread ends a scheduled sleep; the loop reports nothing."""
        clock = FakeClock()
        model = ScriptedModel(
            [
                call("schedule_next_turn", {"wake_in_sec": 3600, "next_prompt": "again"}),
                reply("sleeping"),
                done(),
                reply("ok"),
            ]
        )

        async def main() -> None:
            async with start_autonomous(
                builder(model), "go", scheduler=SleepScheduler(clock=clock), clock=clock
            ) as h:
                await wait_until(lambda: clock.sleepers > 0, within=_PATIENCE)
                waker = threading.Thread(target=h.request_wake)
                waker.start()
                waker.join()
                with anyio.fail_after(_PATIENCE):
                    result = await h.wait()
            assert StopReason.COMPLETED == result.reason
            assert "again" == users(model)[-1]

        run_plain(main)

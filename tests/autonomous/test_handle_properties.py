"""The handle's state machine under random call sequences (hypothesis)."""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autonomous import AutonomousStatus, RunFinished, StopReason, start_autonomous
from autonomous.testing import ScriptedModel, call, done, reply

from .helpers import TICK, builder

OPS = ("pause", "resume", "inject", "wake", "tick", "stop")
ENDED = {
    AutonomousStatus.STOPPED,
    AutonomousStatus.COMPLETED,
    AutonomousStatus.FAILED,
    AutonomousStatus.DEFERRED,
}


async def drive(ops: list[str], turns_before_done: int) -> None:
    """Apply ``ops`` to a live run and check the invariants after every call."""
    script: list[Any] = [
        call("tick", {"n": i}) if i % 2 else reply(f"turn {i}") for i in range(turns_before_done)
    ]
    model = ScriptedModel([*script, done(), reply("bye")], default=reply("idle"))
    paused_by_us = False
    was_ended = False
    async with start_autonomous(builder(model, tools=[TICK]), "go", max_turns=40) as h:
        await h.ready()
        for op in ops:
            ended = h.status in ENDED
            try:
                if op == "pause":
                    await h.pause()
                    paused_by_us = True
                    assert h.status in {AutonomousStatus.PAUSED} | ENDED
                elif op == "resume":
                    await h.resume()
                    paused_by_us = False
                    assert h.status in {AutonomousStatus.RUNNING} | ENDED
                elif op == "inject":
                    await h.inject("note")
                elif op == "wake":
                    h.request_wake()
                elif op == "tick":
                    await anyio.lowlevel.checkpoint()
                elif op == "stop":
                    await h.stop()
                    assert h.status in ENDED
            except RunFinished:
                assert ended or h.status in ENDED, f"{op} refused while {h.status}"
            if was_ended:
                assert h.status in ENDED, "a run that ended came back to life"
            was_ended = was_ended or h.status in ENDED
            if h.status not in ENDED:  # live: paused exactly while we have it paused
                live = AutonomousStatus.PAUSED if paused_by_us else AutonomousStatus.RUNNING
                assert live == h.status, f"{h.status} after {op}, paused by us: {paused_by_us}"
        if paused_by_us and h.status is AutonomousStatus.PAUSED:
            await h.resume()
        with anyio.fail_after(10):
            result = await h.wait()
    assert result.reason in {
        StopReason.COMPLETED,
        StopReason.CONTEXT_CANCELLED,
        StopReason.MAX_TURNS_EXCEEDED,
    }
    assert (result.reason is StopReason.CONTEXT_CANCELLED) == (h.status is AutonomousStatus.STOPPED)
    assert h.status in ENDED


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(OPS), max_size=12), st.integers(0, 4))
def test_random_call_sequences_keep_the_handle_consistent(ops: list[str], turns: int) -> None:
    """Any sequence of pause/resume/inject/wake/stop leaves a consistent, terminating run."""
    anyio.run(drive, ops, turns)

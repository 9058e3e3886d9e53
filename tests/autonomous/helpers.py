"""Builders shared by the driver tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from autonomous import Agent, Tool, function_tool
from autonomous.testing import FakeClock, ScriptedModel
from eventlog import Checkpoint, EventKind, EventLog, MemoryEventLog, SessionRef

from ..support.litellm_http import wait_until

P = TypeVar("P")


async def tick(n: int) -> int:
    """Return n plus one."""
    return n + 1


def boom(reason: str) -> str:
    """Always fail with reason."""
    raise RuntimeError(reason)


def builder(
    model: ScriptedModel,
    *,
    tools: Sequence[Tool] = (),
    session: SessionRef | None = None,
    instructions: str = "You are a test agent.",
) -> Callable[[list[Tool]], Agent]:
    """A build function putting the run's extra tools next to ``tools``."""

    def build(extra_tools: list[Tool]) -> Agent:
        return Agent(
            model, instructions=instructions, tools=[*tools, *extra_tools], session=session
        )

    return build


def memory_session(session_id: str = "s1") -> SessionRef:
    """A session on a fresh in-memory log."""
    return SessionRef(MemoryEventLog(), "test", "tester", session_id)


async def kinds(log: EventLog, ref: SessionRef) -> list[str]:
    """The kinds of every event of ``ref``'s session, in order."""
    return [str(e.kind) for e in await log.read(ref.key)]


async def payloads(ref: SessionRef, kind: EventKind, cls: type[P]) -> list[P]:
    """The payloads of ``kind`` in ``ref``'s session, in order; each must be a ``cls``."""
    found: list[P] = []
    for event in await ref.log.read(ref.key, kinds=[kind]):
        assert isinstance(event.payload, cls), event
        found.append(event.payload)
    return found


async def checkpoints(ref: SessionRef) -> list[Checkpoint]:
    """The checkpoint payloads of ``ref``'s session, in order."""
    return await payloads(ref, EventKind.CHECKPOINT, Checkpoint)


async def asleep(clock: FakeClock, tasks: int) -> None:
    """Wait until ``tasks`` tasks sleep on ``clock``: after an ``advance``, the tasks it woke
    (a poll, a renewal, a turn) have done their work and gone back to sleep.

    ``advance`` takes the woken sleepers off the clock at once, so the count is short until
    each of them sleeps again.
    """
    await wait_until(lambda: clock.sleepers == tasks)


TICK = function_tool(tick)
BOOM = function_tool(boom, sync_in_thread=False)

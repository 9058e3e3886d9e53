"""The durable session bench/resume.py resumes: realistic turns appended straight to a log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs

from autonomous import function_tool
from eventlog import (
    AssistantMessage,
    Checkpoint,
    Event,
    InboxDelivered,
    InboxQueued,
    SessionKey,
    SqliteEventLog,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)

APP, USER = "bench", "ops"
GOAL = (
    "Watch the disk usage of the build fleet. Every check, read the usage of each volume, "
    "compare it with the previous reading, and report any volume above 85% or growing faster "
    "than 2% an hour; otherwise schedule the next check."
)
BATCH = 2000  # events per append while building a session
INBOX_EVERY = 50  # turns between injects in the built history
HISTORY_TURNS = 20


async def check_disks(host: str) -> str:
    """Read the disk usage of ``host``."""
    return f"{host}: /=41% /var=63% /data=77%"


CHECK = function_tool(check_disks)


# ---- building a session -----------------------------------------------------------------


@attrs.frozen
class Built:
    """A session written to a file: its key, size and where it stopped."""

    key: SessionKey
    events: int
    turns: int


def _tool_output(turn: int) -> str:
    rows = [
        f"build-{h:02d}: /=4{h % 10}% /var=6{(h + turn) % 10}% /data=7{turn % 10}%"
        for h in range(8)
    ]
    return "\n".join(rows)


def _turn_events(key: SessionKey, turn: int, totals: list[float], *, inbox: bool) -> list[Event]:
    """One finished turn as the loop writes it (an inject queued before it and delivered in it
    when ``inbox``). ``totals`` is [input, output, cost, calls], updated in place."""
    out: list[Event] = []
    prompt = GOAL if turn == 1 else "Check the disks again and compare with the last reading."
    if inbox:
        mid = f"inbox-{turn}"
        text = f"volume /data on build-0{turn % 8} was cleaned at {turn} h, re-check it"
        out.append(Event.create(key, InboxQueued(mid, text), author="remote"))
        prompt = f"[Inbox]\n- {text}\n\n{prompt}"
    call_id = f"call-{turn}"
    in1, in2 = 900 + 40 * min(turn, HISTORY_TURNS), 1300 + 40 * min(turn, HISTORY_TURNS)
    out += [
        Event.create(key, UserMessage(prompt, turn), author="autonomous"),
        Event.create(
            key,
            AssistantMessage(
                "",
                turn,
                (ToolCallRecord(call_id, "check_disks", '{"host": "build-fleet"}'),),
                model="scripted",
                input_tokens=in1,
                output_tokens=30,
                cost_usd=in1 * 2.5e-6 + 30 * 1e-5,
            ),
            author="autonomous",
        ),
        Event.create(
            key, ToolResult(call_id, "check_disks", _tool_output(turn), turn), author="autonomous"
        ),
        Event.create(
            key,
            AssistantMessage(
                f"Turn {turn}: all volumes below 85%; /data on build-0{turn % 8} grew 0.{turn % 10}% "
                "since the last check, within the normal range. Nothing to report.",
                turn,
                model="scripted",
                input_tokens=in2,
                output_tokens=60,
                cost_usd=in2 * 2.5e-6 + 60 * 1e-5,
            ),
            author="autonomous",
        ),
    ]
    if inbox:
        out.append(Event.create(key, InboxDelivered((f"inbox-{turn}",), turn), author="autonomous"))
    totals[0] += in1 + in2
    totals[1] += 90
    totals[2] += (in1 + in2) * 2.5e-6 + 90 * 1e-5
    totals[3] += 2
    out.append(Event.create(key, _checkpoint(turn, totals, None), author="autonomous"))
    return out


def _checkpoint(
    turn: int,
    totals: list[float],
    stop_reason: str | None,
    *,
    wake: datetime | None = None,
    inbox_from: int = 0,
    next_prompt: str = "continue",
) -> Checkpoint:
    return Checkpoint(
        turns=turn,
        input_tokens=int(totals[0]),
        output_tokens=int(totals[1]),
        cost_usd=totals[2],
        next_prompt=next_prompt,
        stop_reason=stop_reason,
        next_wake_at=wake,
        model_calls=int(totals[3]),
        goal=GOAL,
        inbox_from_seq=inbox_from,
    )


async def build_session(path: Path, target_events: int, session_id: str) -> Built:
    """Append a session of about ``target_events`` events to the log at ``path``.

    Its last turn scheduled a wake (now past) and exited ``deferred``; an inject that arrived
    during that turn is still undelivered (the checkpoint's ``inbox_from_seq`` points at it).
    """
    key = SessionKey(APP, USER, session_id)
    totals = [0.0, 0.0, 0.0, 0.0]
    written = 0
    turn = 0
    async with SqliteEventLog(path) as log:
        pending: list[Event] = []
        while written + len(pending) + 12 < target_events:  # room for the last turn (~7 events)
            turn += 1
            pending += _turn_events(key, turn, totals, inbox=turn % INBOX_EVERY == 0)
            if len(pending) >= BATCH:
                await log.append(pending)
                written += len(pending)
                pending = []
        # The last turn: it asked to be woken in 10 minutes; an inject arrived while it ran.
        turn += 1
        last = _turn_events(key, turn, totals, inbox=False)[:-1]  # its checkpoint comes below
        late = Event.create(
            key, InboxQueued("late-1", "the /data alert on build-03 fired"), author="remote"
        )
        seqs = await log.append([*pending, *last, late])
        written += len(seqs)
        wake = datetime.now(UTC) - timedelta(minutes=1)
        cp = _checkpoint(
            turn, totals, "deferred", wake=wake, inbox_from=seqs[-1], next_prompt="Check the disks."
        )
        await log.append([Event.create(key, cp, author="autonomous")])
        written += 1
    return Built(key, written, turn)

"""What a session's log says of it from outside a run: finished, stopped, and the horizon."""

from __future__ import annotations

import attrs

from eventlog import Checkpoint, Control, CorruptEvent, EventKind, EventLog, SessionKey

from .._result import StopReason
from ._control_requests import ControlAction


def horizon(cp: Checkpoint | None, cp_seq: int) -> int:
    """The first seq whose inbox and control events the checkpoint's run may not have seen.

    A live run sees other processes' events only when its log watch reads them: whatever was
    appended after its last read, even before its checkpoint, is still to be obeyed.
    """
    if cp is None:
        return 1
    if cp.unseen_from:
        return min(cp.unseen_from, cp_seq + 1)
    return cp_seq + 1


@attrs.frozen
class SessionState:
    """A session's latest checkpoint and whether a stop request came after it."""

    checkpoint: Checkpoint | None
    checkpoint_seq: int
    stop_pending: bool

    @property
    def completed(self) -> bool:
        """The session's run completed (its done tool was called)."""
        cp = self.checkpoint
        return cp is not None and cp.stop_reason == StopReason.COMPLETED.value

    @property
    def stopped(self) -> bool:
        """The session was stopped on purpose: only a forced resume runs it again."""
        return (self.checkpoint is not None and self.checkpoint.stopped) or self.stop_pending

    @property
    def finished(self) -> bool:
        """Completed or stopped: control and inject are refused."""
        return self.completed or self.stopped


async def session_state(log: EventLog, key: SessionKey) -> SessionState:
    """Read a session's state: its latest checkpoint, then the control events since its
    horizon (two indexed reads)."""
    event = await log.latest_checkpoint(key)
    cp = event.payload if event is not None else None
    assert cp is None or isinstance(cp, Checkpoint)
    cp_seq = event.seq if event is not None else 0
    try:
        controls = await log.read(key, after_seq=horizon(cp, cp_seq) - 1, kinds=[EventKind.CONTROL])
    except CorruptEvent:  # a bad row must not keep a stop from landing; the run reports it
        controls = []
    stop = any(
        isinstance(e.payload, Control) and e.payload.action == ControlAction.STOP for e in controls
    )
    return SessionState(cp, cp_seq, stop)

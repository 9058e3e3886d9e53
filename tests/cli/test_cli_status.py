"""The one-word status `autonomous ls` shows for a session summary."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import attrs

from autonomous._cli._ls import status_of
from eventlog import SessionKey, SessionSummary

NOW = datetime(2030, 1, 1, tzinfo=UTC)
BASE = SessionSummary(SessionKey("a", "u", "s"), 3, 0.0, None, None, NOW, 9)
LIVE = f"{socket.gethostname()}:{os.getpid()}:token"


class TestStatusOf:
    def test_a_live_paused_run_is_shown_paused(self) -> None:
        """A held session whose latest checkpoint says paused is 'paused', not 'running'."""
        assert "paused" == status_of(attrs.evolve(BASE, holder=LIVE, paused=True), NOW)
        assert "running" == status_of(attrs.evolve(BASE, holder=LIVE), NOW)

    def test_a_session_stopped_on_purpose_is_shown_stopped(self) -> None:
        """A stopped checkpoint is 'stopped' even when it had deferred itself."""
        stopped = attrs.evolve(BASE, stop_reason="context_cancelled", stopped=True)
        assert "stopped" == status_of(stopped, NOW)

    def test_a_budget_stop_and_an_abort_are_not_stopped(self) -> None:
        """Only an operator's stop is 'stopped' (resume refuses it without --force); a budget
        that ran out and an abort say so."""
        for reason in ("max_turns_exceeded", "max_tokens_exceeded", "wallclock_exceeded"):
            assert "budget" == status_of(attrs.evolve(BASE, stop_reason=reason), NOW)
        assert "aborted" == status_of(attrs.evolve(BASE, stop_reason="aborted"), NOW)
        assert "failed" == status_of(attrs.evolve(BASE, stop_reason="lease_lost"), NOW)


class TestHolderGone:
    def test_a_zombie_holder_is_gone(self) -> None:
        """A holder whose process exited but was not reaped yet counts as gone."""
        import subprocess
        import sys

        from autonomous._cli._common import holder_gone

        child = subprocess.Popen([sys.executable, "-c", "pass"])
        try:
            # Wait for it to exit without reaping it: it stays a zombie.
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
            assert holder_gone(f"{socket.gethostname()}:{child.pid}:token")
        finally:
            child.wait()
        assert not holder_gone(LIVE)

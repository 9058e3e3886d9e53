"""``autonomous daemon``: the orchestrator that resumes sessions when they are due.

Every ``poll`` seconds it lists the log's due sessions (deferred, waking within the next poll) and,
unless ``--deferred-only``, the interrupted ones (a checkpoint with no exit and no live holder: a
process that crashed mid-run), and resumes each in its own task with ``resume_autonomous``, from
the spec file the session recorded. Its state is all in the log, so it survives its own restart:

- a session another process holds (a live lease) is never run here; losing the lease race is
  ``SessionLocked``, and the session is simply left to its holder. A lease left behind by a
  process of this host that has exited is taken over at once;
- a session whose resume failed (a missing spec, a build error) is not tried again until its
  latest checkpoint changes;
- on SIGINT or SIGTERM the daemon stops its runs (each writes its final checkpoint) and hands each
  one back as due (a ``deferred`` checkpoint authored ``autonomous-daemon``), so the next daemon
  picks it up where this one left it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import anyio
import attrs
import structlog

from eventlog import Checkpoint, Event, EventLog, SessionKey, SessionLocked, SessionRef, utcnow
from eventlog import SessionSummary as Summary

from .._driver import resume_autonomous
from .._result import RunResult
from ._common import (
    emit_json,
    holder_gone,
    open_log,
    prepare_litellm,
    spec_of_session,
)
from ._common import until_signal as _until_signal
from ._exits import for_signal
from ._times import show_time

_log = structlog.get_logger("autonomous.daemon")
_AUTHOR = "autonomous-daemon"
_HAND_BACK_TIMEOUT = 5.0

#: ``report(event, **fields)``: how the daemon tells what it does.
Report = Callable[..., None]


class Daemon:
    """Resumes due (and interrupted) sessions of one log, each once at a time, until cancelled."""

    def __init__(
        self, log: EventLog, *, poll: float, once: bool, crashed: bool, report: Report
    ) -> None:
        self._log = log
        self._poll = poll
        self._once = once
        self._crashed = crashed
        self._report = report
        self._active: set[SessionKey] = set()
        self._failed: dict[SessionKey, int] = {}  # the checkpoint seq a resume failed on

    async def serve(self) -> None:
        """Poll and resume until cancelled; with ``once``, one pass and wait for its runs."""
        self._report("daemon_started", poll=self._poll, once=self._once)
        async with anyio.create_task_group() as tg:
            while True:
                for summary in await self.candidates(utcnow()):
                    self._active.add(summary.key)
                    tg.start_soon(self._resume, summary)
                if self._once:
                    break
                await anyio.sleep(self._poll)

    async def candidates(self, now: datetime) -> list[Summary]:
        """Sessions to resume now: due (or waking within a poll) and interrupted ones, unheld."""
        ahead = 0.0 if self._once else self._poll
        found = list(await self._log.due_sessions(now + timedelta(seconds=ahead)))
        if self._crashed:
            found += [s for s in await self._log.sessions() if s.stop_reason is None]
        chosen: dict[SessionKey, Summary] = {}
        for s in found:
            if (s.holder and not holder_gone(s.holder)) or s.key in self._active or s.key in chosen:
                continue
            if self._failed.get(s.key) == s.checkpoint_seq:
                continue
            chosen[s.key] = s
        return list(chosen.values())

    async def _resume(self, summary: Summary) -> None:
        """Resume one session and report how it went; a failure is reported, never raised."""
        key = summary.key
        wake = summary.next_wake_at
        self._report("resuming", session=str(key), due=wake.isoformat() if wake else None)
        try:
            result = await self._run(summary)
        except SessionLocked as exc:
            self._report("skipped", session=str(key), holder=exc.holder)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(_HAND_BACK_TIMEOUT):
                await self._hand_back(summary)
            raise
        except Exception as exc:  # a bad session must not bring the daemon down
            self._failed[key] = summary.checkpoint_seq
            self._report("failed", session=str(key), error=f"{type(exc).__name__}: {exc}")
        else:
            wake = result.next_wake_at
            self._report(
                "finished",
                session=str(key),
                reason=result.reason.value,
                turns=result.turns,
                cost_usd=round(result.cost_usd, 6),
                next_wake_at=wake.isoformat() if wake else None,
            )
        finally:
            self._active.discard(key)

    async def _run(self, summary: Summary) -> RunResult:
        """Load the session's spec and resume it with the spec's options."""
        key = summary.key
        spec = await spec_of_session(self._log, key)
        await prepare_litellm(spec)
        ref = SessionRef(log=self._log, app=key.app, user=key.user, session_id=key.session_id)
        build = spec.build_function(ref)
        return await resume_autonomous(build, ref, **spec.run_options())

    async def _hand_back(self, summary: Summary) -> None:
        """After a shutdown stopped a run: make the session due again, where it stopped."""
        latest = await self._log.latest_checkpoint(summary.key)
        if latest is None or latest.seq == summary.checkpoint_seq:
            return  # nothing ran: the session is as due as it was
        cp = latest.payload
        if not isinstance(cp, Checkpoint) or cp.stop_reason not in (None, "context_cancelled"):
            return  # it finished or deferred itself
        now = utcnow()
        wake = summary.next_wake_at if summary.next_wake_at and summary.next_wake_at > now else now
        handed = attrs.evolve(cp, stop_reason="deferred", next_wake_at=wake)
        await self._log.append([Event.create(summary.key, handed, author=_AUTHOR)])
        self._report("handed_back", session=str(summary.key), due=wake.isoformat())


def reporter(as_json: bool, *, utc: bool = False) -> Report:
    """Report lines on standard output: JSON objects with ``--json``, else readable text
    (each line starting with its time, local unless ``utc``)."""

    def report(event: str, **fields: Any) -> None:
        """Log ``event`` and print it."""
        _log.info(event, **fields)
        if as_json:
            emit_json({"event": event, "at": utcnow().isoformat(), **fields})
            return
        shown = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
        print(f"{show_time(utcnow(), utc=utc)} {event} {shown}".rstrip(), flush=True)

    return report


async def cmd_daemon(args: argparse.Namespace) -> int:
    """Run the orchestrator until SIGINT/SIGTERM (or one pass with ``--once``)."""
    if not args.poll > 0:
        print("error: --poll must be > 0 seconds", file=sys.stderr)
        return 2
    report = reporter(args.json, utc=args.utc)
    async with open_log(args, create=True) as log:
        daemon = Daemon(
            log, poll=args.poll, once=args.once, crashed=not args.deferred_only, report=report
        )
        _, signum = await _until_signal(daemon.serve)
    report("daemon_stopped", signal=signum)
    return for_signal(signum) if signum is not None else 0

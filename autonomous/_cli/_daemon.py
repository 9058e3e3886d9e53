"""``autonomous daemon``: the orchestrator that resumes sessions when they are due.

Every ``poll`` seconds of its clock it lists the log's due sessions (deferred, waking within the
next poll) and, unless ``--deferred-only``, the interrupted ones (a checkpoint with no exit and no
live holder: a process that crashed mid-run), and resumes each in its own task with
``resume_autonomous``, from the spec file the session recorded. At most ``max_concurrent`` run
at once: the others wait for a slot, earliest due first (a session that crashed mid-run counts
as due when it last wrote), and the next poll comes early when a slot frees. Its state is all in
the log, so it survives its own restart:

- a session another process holds (a live lease) is never run here; losing the lease race is
  ``SessionLocked``, and the session is simply left to its holder. A lease left behind by a
  process of this host that has exited is taken over at once;
- a session whose resume failed (a missing spec, a build error) is reported once and not tried
  again until its latest checkpoint changes (``autonomous resume SESSION --spec PATH`` adopts a
  moved spec);
- a session stopped on purpose is never due; a paused one (a pause request came while it
  slept) is reported ``paused`` and left alone until ``autonomous unpause``;
- a run that returns runs the spec's ``on_exit`` hook (:mod:`._hooks`), a failing one reported;
- on SIGINT or SIGTERM the daemon stops its runs (each writes its final checkpoint) and hands each
  one back as due (a ``deferred`` checkpoint authored ``autonomous-daemon``), so the next daemon
  picks it up where this one left it.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta

import anyio
import attrs

from eventlog import Checkpoint, Event, EventLog, SessionKey, SessionLocked, SessionRef
from eventlog import SessionSummary as Summary
from scheduler import Clock, SystemClock

from .._driver import resume_autonomous
from .._result import RunResult
from ._common import CliError, holder_gone, open_log, prepare_litellm, spec_of_session
from ._durations import duration_arg
from ._exits import for_signal
from ._hooks import spec_hook
from ._jsonlines import Report, json_lines_logging, reporter
from ._run import refusals, result_summary
from ._signals import until_signal
from ._spec import AgentSpec

_AUTHOR = "autonomous-daemon"
_HAND_BACK_TIMEOUT = 5.0
#: How many sessions run at once unless ``--max-concurrent`` says otherwise.
DEFAULT_MAX_CONCURRENT = 4


class Daemon:
    """Resumes due (and interrupted) sessions of one log, each once at a time, at most
    ``max_concurrent`` together, until cancelled; it polls and reads "now" on ``clock``."""

    def __init__(
        self,
        log: EventLog,
        *,
        poll: float,
        once: bool,
        crashed: bool,
        report: Report,
        clock: Clock | None = None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
        self._log = log
        self._poll = poll
        self._once = once
        self._crashed = crashed
        self._report = report
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._max = max_concurrent
        self._active: set[SessionKey] = set()
        self._failed: dict[SessionKey, int] = {}  # the checkpoint seq a resume failed on
        self._paused: set[SessionKey] = set()  # reported paused, not run until unpaused
        self._freed = anyio.Event()  # set when a run ends: a slot for a waiting session

    async def serve(self) -> None:
        """Poll and resume until cancelled; with ``once``, what one pass found (in turn when
        there are more than the slots), then wait for its runs."""
        self._report("daemon_started", poll=self._poll, once=self._once, max_concurrent=self._max)
        async with anyio.create_task_group() as tg:
            waiting = await self.candidates(self._clock.now())
            while True:
                self._freed = anyio.Event()  # before starting any: no end goes unseen
                while waiting and len(self._active) < self._max:
                    summary = waiting.pop(0)
                    self._active.add(summary.key)
                    tg.start_soon(self._resume, summary)
                if self._once and not waiting:
                    break
                await self._pause()
                if not self._once:  # a fresh look: what waited may be held or gone by now
                    waiting = await self.candidates(self._clock.now())

    async def _pause(self) -> None:
        """Until the next poll is due on the clock, or a run ends and frees a slot."""

        async def on_freed(scope: anyio.CancelScope) -> None:
            """End the pause when a slot frees."""
            await self._freed.wait()
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(on_freed, tg.cancel_scope)
            await self._clock.sleep_until(self._clock.now() + timedelta(seconds=self._poll))
            tg.cancel_scope.cancel()

    async def candidates(self, now: datetime) -> list[Summary]:
        """Sessions to resume now, earliest due first: due (or waking within a poll) and
        interrupted ones, neither held nor running here nor failed on their checkpoint."""
        ahead = 0.0 if self._once else self._poll
        found = list(await self._log.due_sessions(now + timedelta(seconds=ahead)))
        if self._crashed:
            found += [s for s in await self._log.sessions() if s.stop_reason is None]
        chosen: dict[SessionKey, Summary] = {}
        for s in found:
            if (s.holder and not holder_gone(s.holder)) or s.key in self._active or s.key in chosen:
                continue
            if self._failed.get(s.key) == s.checkpoint_seq or self._left_paused(s):
                continue
            chosen[s.key] = s
        return sorted(chosen.values(), key=_due)

    def _left_paused(self, summary: Summary) -> bool:
        """Whether a session is paused (a pause request came while it slept): it is left alone
        until an unpause, and reported once, so an operator sees why it does not run."""
        if not summary.paused:
            self._paused.discard(summary.key)
            return False
        if summary.key not in self._paused:
            self._paused.add(summary.key)
            self._report("paused", session=str(summary.key), hint="autonomous unpause SESSION")
        return True

    async def _resume(self, summary: Summary) -> None:
        """Resume one session, report how it went, run its hook; a failure is reported, never
        raised."""
        key = summary.key
        wake = summary.next_wake_at
        self._report("resuming", session=str(key), due=wake.isoformat() if wake else None)
        try:
            spec, result = await self._run(summary)
        except SessionLocked as exc:
            self._report("skipped", session=str(key), holder=exc.holder)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(_HAND_BACK_TIMEOUT):
                await self._hand_back(summary)
            raise
        except Exception as exc:  # a bad session must not bring the daemon down
            self._failed[key] = summary.checkpoint_seq
            error = str(exc) if isinstance(exc, CliError) else f"{type(exc).__name__}: {exc}"
            self._report("failed", session=str(key), error=error)
        else:
            await self._finished(key, spec, result)
        finally:
            self._active.discard(key)
            self._freed.set()

    async def _finished(self, key: SessionKey, spec: AgentSpec, result: RunResult) -> None:
        """Report a run that returned, and run the spec's on_exit hook for it."""
        wake = result.next_wake_at
        self._report(
            "finished",
            session=str(key),
            reason=result.reason.value,
            turns=result.turns,
            cost_usd=round(result.cost_usd, 6),
            next_wake_at=wake.isoformat() if wake else None,
        )
        failure = await spec_hook(spec, result_summary(key, result), clock=self._clock)
        if failure is not None:
            self._report("hook_failed", session=str(key), error=failure)

    async def _run(self, summary: Summary) -> tuple[AgentSpec, RunResult]:
        """Load the session's spec and resume it with the spec's options."""
        key = summary.key
        # as strict as `run`: a spec edited into errors (spec_of_session validates it), an ask
        # gate (no terminal here) or an unpriced cost cap is a failure reported once, not a run
        spec = await spec_of_session(self._log, key)
        await prepare_litellm(spec)
        options = spec.run_options()
        refusals(spec, options, None)
        ref = SessionRef(log=self._log, app=key.app, user=key.user, session_id=key.session_id)
        build = spec.build_function(ref)
        return spec, await resume_autonomous(build, ref, **options)

    async def _hand_back(self, summary: Summary) -> None:
        """After a shutdown stopped a run: make the session due again, where it stopped."""
        latest = await self._log.latest_checkpoint(summary.key)
        if latest is None or latest.seq == summary.checkpoint_seq:
            return  # nothing ran: the session is as due as it was
        cp = latest.payload
        if not isinstance(cp, Checkpoint) or cp.stop_reason not in (None, "context_cancelled"):
            return  # it finished or deferred itself
        now = self._clock.now()
        wake = summary.next_wake_at if summary.next_wake_at and summary.next_wake_at > now else now
        handed = attrs.evolve(cp, stop_reason="deferred", next_wake_at=wake)
        await self._log.append([Event.create(summary.key, handed, author=_AUTHOR)])
        self._report("handed_back", session=str(summary.key), due=wake.isoformat())


def _due(summary: Summary) -> datetime:
    """When a session became due: its wake time, or (interrupted) when it last wrote."""
    when = summary.next_wake_at or summary.updated_at
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def add_daemon_options(parser: argparse.ArgumentParser) -> None:
    """The ``daemon`` command's options."""
    parser.add_argument(
        "--poll",
        type=duration_arg,
        default=5.0,
        help="time between polls: seconds or a duration like 30s, 1m (default 5)",
    )
    parser.add_argument(
        "--once", action="store_true", help="one pass: resume what is due, then exit"
    )
    parser.add_argument(
        "--deferred-only",
        action="store_true",
        help="do not resume interrupted (crashed) sessions, only deferred ones",
    )
    parser.add_argument(
        "--max-concurrent",
        type=_slots,
        default=DEFAULT_MAX_CONCURRENT,
        metavar="N",
        help=f"run at most N sessions at once; the others wait (default {DEFAULT_MAX_CONCURRENT})",
    )


def _slots(text: str) -> int:
    """An argparse ``type=`` for ``--max-concurrent``: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


async def cmd_daemon(args: argparse.Namespace) -> int:
    """Run the orchestrator until SIGINT/SIGTERM (or one pass with ``--once``)."""
    if not args.poll > 0:
        print("error: --poll must be > 0 seconds", file=sys.stderr)
        return 2
    if args.json:  # one stream of JSON lines on stdout: the reports and every log
        json_lines_logging(args.verbose)
    report = reporter(args.json, utc=args.utc)
    async with open_log(args, create=True) as log:
        daemon = Daemon(
            log,
            poll=args.poll,
            once=args.once,
            crashed=not args.deferred_only,
            report=report,
            max_concurrent=args.max_concurrent,
        )
        _, signum = await until_signal(daemon.serve)
    report("daemon_stopped", signal=signum)
    return for_signal(signum) if signum is not None else 0

"""Daemon: the fleet member as a library object, resuming a log's due sessions with a build
function, in the program's own event loop."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from eventlog import EventLog, SessionRef
from eventlog import SessionSummary as Summary
from scheduler import Clock

from .._agent import RebuildFn
from .._durable._durable import AdoptedLease
from .._errors import ConfigurationError
from .._logging import get_logger
from .._options import RunKwargs, make_options
from .._result import RunResult
from .._run._driver import resume_autonomous
from ._claims import DEFAULT_LEASE_TTL, DEFAULT_MAX_CONCURRENT, DEFAULT_POLL, Claimer, Report

_log = get_logger("autonomous.fleet")


def _log_report(event: str, **fields: Any) -> None:
    """A report as a log line of ``autonomous.fleet`` (failures as errors)."""
    if event in ("failed", "hook_failed", "store_unavailable"):
        _log.warning(event, **fields)
    else:
        _log.info(event, **fields)


class Daemon(Claimer):
    """``autonomous daemon`` as an object: resumes every due session of ``log`` with
    ``build``, as many at once as ``max_concurrent`` allows, each on a lease it claims and
    renews, until stopped. Any number of daemons, here or in other processes and hosts, may
    serve one log: two never run one session.

    ``build(extra_tools, session_id)`` (sync or async) returns the Agent of a claimed session,
    on that session, as for :func:`autonomous.resume_autonomous`; ``options`` (a dict of
    :class:`~autonomous.RunKwargs`) are the keyword options each resume gets, a ``scheduler``
    that exits on a defer, say (``ExitOnDeferScheduler``), so that a deferred run hands its
    wait back to the daemon. The other options are the command's:

    - ``poll``: seconds (or a timedelta) between looks for due sessions; a session due within
      the next poll is taken at once.
    - ``once``: one pass: resume what is due now, wait for those runs, return.
    - ``interrupted``: also resume sessions a crashed process left running (no live holder);
      False is the command's ``--deferred-only``.
    - ``max_concurrent``: at most this many sessions run at once; the others wait.
    - ``lease_ttl``: seconds (or a timedelta) a claimed session's lease lasts unrenewed; it is
      renewed a third of that apart, and a daemon that dies loses its sessions this long after.
    - ``clock``: the clock its polls, leases and waits read, and its runs unless ``options``
      give theirs (a ``scheduler.FakeClock`` in tests).
    - ``report``: ``report(event, **fields)`` for each thing it does (``daemon_started``,
      ``resuming``, ``finished``, ``failed``, ``handed_back``, ``paused``,
      ``store_unavailable`` ...); by default they are logged (``autonomous.fleet``).

    Bad input (no build function, an option out of range, a run option no run takes) is a
    :class:`~autonomous.ConfigurationError` at once, naming it. A session whose resume fails
    is reported ``failed``, never raised: the daemon goes on.

    Run it with ``await daemon.run()`` (until :meth:`stop`, or cancelled), or in the
    background of a block::

        async with Daemon(log, build, options={"scheduler": ExitOnDeferScheduler()}):
            ...  # leaving the block stops it: its runs handed back, as due, for the next
    """

    def __init__(
        self,
        log: EventLog,
        build: RebuildFn,
        *,
        poll: float | timedelta = DEFAULT_POLL,
        once: bool = False,
        interrupted: bool = True,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        lease_ttl: float | timedelta = DEFAULT_LEASE_TTL,
        clock: Clock | None = None,
        report: Report | None = None,
        options: RunKwargs | None = None,
    ) -> None:
        if not callable(build):
            raise ConfigurationError(
                f"build must be a callable (extra_tools, session_id) -> Agent, got {build!r}"
            )
        if options is not None and not isinstance(options, dict):
            raise ConfigurationError(f"options must be a dict of run options, got {options!r}")
        opts = RunKwargs(**options) if options is not None else RunKwargs()  # ours: a copy
        if "lease_ttl" in opts:  # the runs are on the daemon's leases: it renews them
            raise ConfigurationError(
                "lease_ttl is the daemon's (its claims' leases): give it as Daemon(lease_ttl=...),"
                " not in options"
            )
        make_options(opts)  # refused here, by name, rather than at each resume
        super().__init__(
            log,
            poll=poll,
            once=once,
            interrupted=interrupted,
            report=report if report is not None else _log_report,
            clock=clock,
            max_concurrent=max_concurrent,
            lease_ttl=lease_ttl,
        )
        self._build = build
        # the runs read the daemon's clock too (unless options give theirs): a session's wake
        # is on the clock that set it
        if clock is not None:
            opts.setdefault("clock", clock)
        self._options = opts

    async def _run(self, summary: Summary, adopted: AdoptedLease) -> RunResult:
        """Resume the claimed session with the build function, on the claimed lease."""
        key = summary.key
        ref = SessionRef(log=self._log, app=key.app, user=key.user, session_id=key.session_id)
        return await resume_autonomous(self._build, ref, lease=adopted, **self._options)

"""``autonomous daemon``'s resumes: each claimed session from the spec file it recorded.

The claims, leases, hand-backs and retries are :class:`autonomous.fleet._claims.Claimer`'s;
here a claimed session's spec is read and checked each time (parsed, validated and built once
per version of the file: :class:`autonomous.spec._cache.SpecCache`), it runs under its own budgets
(:mod:`._budgets`), and a run that returns runs the spec's ``on_exit`` hook (:mod:`._hooks`),
a failing one reported. A session whose spec is missing, broken or not its own, or whose
events a newer schema wrote, fails its resume: reported once, its lease released at once for
another worker, and not tried here again until its latest checkpoint changes or a spec is
adopted for it (``autonomous adopt --spec PATH SESSION``).
"""

from __future__ import annotations

from datetime import timedelta

from eventlog import (
    SCHEMA_VERSION,
    Checkpoint,
    EventLog,
    SessionKey,
    SessionRef,
    UnknownSchemaVersion,
)
from eventlog import SessionSummary as Summary
from scheduler import Clock

from .._durable._durable import AdoptedLease
from .._result import RunResult
from .._run._driver import resume_autonomous
from ..fleet._claims import DEFAULT_LEASE_TTL, DEFAULT_MAX_CONCURRENT, Claimer, Report
from ..spec._cache import SpecCache
from ..spec._spec import AgentSpec
from ._budgets import budgets_in_force, recorded_budgets, resume_options
from ._common import CliError, load_session_spec, prepare_litellm, spec_of_session
from ._hooks import spec_hook
from ._run import refusals, result_summary


class Daemon(Claimer):
    """The command's daemon: :class:`~autonomous.fleet._claims.Claimer` resuming each session
    from its recorded spec; ``crashed`` also takes interrupted sessions (not
    ``--deferred-only``). :meth:`serve` is :meth:`run`."""

    def __init__(
        self,
        log: EventLog,
        *,
        poll: float | timedelta,
        once: bool,
        crashed: bool,
        report: Report,
        clock: Clock | None = None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        lease_ttl: float | timedelta = DEFAULT_LEASE_TTL,
    ) -> None:
        super().__init__(
            log,
            poll=poll,
            once=once,
            interrupted=crashed,
            report=report,
            clock=clock,
            max_concurrent=max_concurrent,
            lease_ttl=lease_ttl,
        )
        self._specs = SpecCache(load_session_spec)  # each spec file loaded once per version
        self._spec_of: dict[SessionKey, AgentSpec] = {}  # a returned run's spec, for its hook

    async def serve(self) -> None:
        """Claim and resume until cancelled (or stopped); with ``once``, what is due now."""
        await self.run()

    def _error_text(self, exc: Exception) -> str:
        """A CliError says it all; any other error is shown with its type."""
        return str(exc) if isinstance(exc, CliError) else super()._error_text(exc)

    async def _finished(self, key: SessionKey, result: RunResult) -> None:
        """Report a run that returned, and run the spec's on_exit hook for it."""
        spec = self._spec_of.pop(key)
        latest = await self._log.latest_checkpoint(key)
        cp = latest.payload if latest is not None else None
        summary = result_summary(key, result, cp if isinstance(cp, Checkpoint) else None)
        self._report_end(key, result, summary["error"])
        failure = await spec_hook(spec, summary, clock=self._clock)
        if failure is not None:
            self._report("hook_failed", session=str(key), error=failure)

    async def _run(self, summary: Summary, adopted: AdoptedLease) -> RunResult:
        """Load the session's spec and resume it on the claimed lease, with the spec's options
        but its budgets: the session's own (see :mod:`._budgets`)."""
        key = summary.key
        # as strict as `run`: a spec edited into errors (spec_of_session validates it), an ask
        # gate (no terminal here) or an unpriced cost cap is a failure reported once, not a run;
        # so is a spec that is not the session's (another worker may have it) and a session a
        # newer schema wrote (a newer worker can run it)
        try:
            spec = await spec_of_session(self._log, key, changed="refuse", load=self._specs.load)
            await prepare_litellm(spec)
            recorded = await recorded_budgets(self._log, key)  # the session's, not the spec's
            options = resume_options(spec.run_options(), {}, recorded)
            refusals(spec, {**options, **budgets_in_force(recorded, options)}, None)
            ref = SessionRef(log=self._log, app=key.app, user=key.user, session_id=key.session_id)
            build = self._specs.builder(spec)(ref)
            result = await resume_autonomous(build, ref, lease=adopted, **options)
        except UnknownSchemaVersion as exc:
            raise CliError(
                f"session {key} has events of a newer event schema than this worker reads "
                f"(version {SCHEMA_VERSION}): {exc}; this worker leaves it to an upgraded one"
            ) from exc
        self._spec_of[key] = spec
        return result

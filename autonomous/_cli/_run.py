"""``autonomous run SPEC`` and ``autonomous resume SESSION``: a run in this process, with live
progress on standard error, Ctrl-C stopping it cleanly (the session stays resumable)."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Mapping
from contextlib import nullcontext
from datetime import datetime
from typing import Any

import anyio
import attrs

from eventlog import (
    Budgets,
    Checkpoint,
    EventLog,
    EventLogError,
    SessionKey,
    SessionLocked,
    SessionRef,
    utcnow,
)
from permissions import Prompter, TerminalPrompter

from .._control._session_state import session_state
from .._errors import ConfigurationError
from .._options import make_options
from .._result import RunResult, StopReason
from .._run._driver import resume_autonomous, run_autonomous
from .._run._run import refuse_started
from ..spec._spec import AgentSpec, line_of
from ..spec._validate import unpriced_cap, validated_spec
from ._budgets import budgets_in_force, recorded_budgets, resume_options
from ._common import (
    CliError,
    adopt_spec,
    cli_errors,
    emit_json,
    open_log,
    prepare_litellm,
    record_spec,
    resolve_session,
    spec_of_session,
)
from ._decimals import usd
from ._durations import duration_arg
from ._exits import Exit, for_reason, for_signal
from ._hooks import spec_hook
from ._ls import cost_text
from ._signals import until_signal
from ._status import PlainProgress, progress_for
from ._times import show_wake
from ._view import ended_text

#: Seconds the store has to answer the read of the summary printed after a signal.
_SUMMARY_TIMEOUT = 2.0


def add_budget_overrides(parser: argparse.ArgumentParser) -> None:
    """The options that override a spec's budgets for one run or resume."""
    parser.add_argument("--max-turns", type=int, help="override budgets.max_turns")
    parser.add_argument("--max-cost", type=float, help="override budgets.max_cost_usd")
    parser.add_argument(
        "--max-wallclock",
        type=duration_arg,
        help="override budgets.max_wallclock (seconds, or a duration: 30m, 2h)",
    )


def checked_spec(path: str | os.PathLike[str], model: str | None = None) -> AgentSpec:
    """The spec at ``path`` as strict as ``validate``: every error at once, or a CliError.
    ``model`` (a ``--model`` override) replaces the file's model after the checks."""
    with cli_errors():
        spec = validated_spec(path, interactive=sys.stdin.isatty())
    return attrs.evolve(spec, model=model) if model else spec


def _at(spec: AgentSpec, key: str) -> str:
    """``file:line`` of ``key`` in the spec (``file`` when the line is not known)."""
    line = line_of(key, spec.lines)
    return f"{spec.path}" if line is None else f"{spec.path}:{line}"


def refusals(spec: AgentSpec, options: Mapping[str, Any], prompter: Prompter | None) -> None:
    """Refuse, in one line with the fix, a run that cannot work as configured."""
    if spec.permission_mode == "ask" and prompter is None:
        raise CliError(
            f'{_at(spec, "permissions.mode")}: permissions.mode = "ask" needs a terminal to '
            'ask on, and standard input is not one: run it in a terminal, or set mode = "allow" '
            'with allow rules for the tools it may use (or mode = "plan" / "yolo")'
        )
    why = unpriced_cap(spec, options.get("max_cost_usd", 0.0))
    if why is not None:
        raise CliError(f"{_at(spec, 'budgets.max_cost_usd')}: {why}")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The budgets the command line sets (``--max-turns`` ...), by their option names."""
    given = {
        "max_turns": args.max_turns,
        "max_cost_usd": args.max_cost,
        "max_wallclock": args.max_wallclock,
    }
    return {name: value for name, value in given.items() if value is not None}


def _prompter() -> Prompter | None:
    """Who answers an ``ask`` gate: this terminal, when standard input is one."""
    return TerminalPrompter() if sys.stdin.isatty() else None


def _options(spec: AgentSpec, args: argparse.Namespace) -> dict[str, Any]:
    """A new session's run options: the spec's, with the command line's overrides, checked
    before any write."""
    prompter = _prompter()
    options = spec.run_options(prompter=prompter)
    options.update(_overrides(args))
    _check(spec, options, options, prompter)
    return options


def _resume_options(
    spec: AgentSpec, args: argparse.Namespace, recorded: Budgets | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A resume's run options (:func:`resume_options`: the session's budgets stay its own),
    and the same with the budgets in force, for the progress lines; checked before any
    write."""
    prompter = _prompter()
    options = resume_options(spec.run_options(prompter=prompter), _overrides(args), recorded)
    shown = {**options, **budgets_in_force(recorded, options)}
    _check(spec, options, shown, prompter)
    return options, shown


def _check(
    spec: AgentSpec,
    options: Mapping[str, Any],
    in_force: Mapping[str, Any],
    prompter: Prompter | None,
) -> None:
    """Refuse options that cannot work (``in_force``: with the budgets the run will have)."""
    refusals(spec, in_force, prompter)
    with cli_errors():  # misuse (a bad option, a gate that would deadlock) before any write
        opts = make_options(dict(options))
        if opts.permissions_gate is not None:
            opts.permissions_gate.startup_check()


async def cmd_run(args: argparse.Namespace) -> int:
    """Start a new session from a spec file and run it here."""
    spec = checked_spec(args.spec, args.model)
    goal = args.goal or spec.goal
    if not goal.strip():
        raise CliError(f"{args.spec}: no goal: pass --goal TEXT or set goal in the spec")
    session_id = args.session or f"{spec.name}-{secrets.token_hex(3)}"
    await prepare_litellm(spec)  # first: the price check reads litellm's cost table
    options = _options(spec, args)
    async with open_log(args, create=True) as log:
        ref = spec.session_ref(log, session_id)
        try:
            await refuse_started(log, ref.key)
        except ConfigurationError:
            raise CliError(f"session {ref.key} already exists: continue it with `resume`") from None
        with cli_errors():
            build = spec.build_function(ref)
        await record_spec(log, ref.key, spec, args.model)
        _announce(args, f"session {ref.key} started from {spec.path}")
        progress = options["progress"] = _printer(args, options, None)
        with progress or nullcontext():
            result, signum = await until_signal(lambda: run_autonomous(build, goal, **options))
        return await _finish(args, log, ref.key, result, signum, spec=spec)


async def cmd_resume(args: argparse.Namespace) -> int:
    """Continue a stopped, deferred or crashed session here, from its latest checkpoint."""
    async with open_log(args) as log:
        key = await resolve_session(log, args.session)
        await _refuse_stopped(log, key, force=args.force)
        # both as strict as validate (a spec with errors is never recorded nor run)
        spec = await (adopt_spec(log, key, args.spec) if args.spec else spec_of_session(log, key))
        await prepare_litellm(spec)
        options, in_force = _resume_options(spec, args, await recorded_budgets(log, key))
        ref = SessionRef(log=log, app=key.app, user=key.user, session_id=key.session_id)
        with cli_errors():
            build = spec.build_function(ref)
        latest = await log.latest_checkpoint(key)
        start = latest.payload if latest and isinstance(latest.payload, Checkpoint) else None
        progress = options["progress"] = _printer(args, in_force, start)
        _announce(args, f"resuming session {key} from {spec.path}")
        try:
            with progress or nullcontext():
                result, signum = await until_signal(
                    lambda: resume_autonomous(build, ref, force=args.force, **options)
                )
        except SessionLocked as exc:
            raise CliError(f"session {key} is held by {exc.holder}", Exit.LOCKED) from exc
        return await _finish(args, log, key, result, signum, spec=spec)


async def _refuse_stopped(log: EventLog, key: SessionKey, *, force: bool) -> None:
    """A session stopped on purpose stays stopped: only ``--force`` runs it again."""
    if not force and (await session_state(log, key)).stopped:
        raise CliError(
            f"session {key} was stopped: `autonomous resume {key} --force` runs it again",
            Exit.STOPPED,
        )


def _printer(
    args: argparse.Namespace, options: Mapping[str, Any], start: Checkpoint | None
) -> PlainProgress | None:
    """The progress display on standard error (live on a terminal), unless ``--quiet``."""
    if args.quiet:
        return None
    # With -v the structured logs go to standard error too: plain lines mix with them.
    return progress_for(dict(options), start, sys.stderr, utc=args.utc, plain=args.verbose > 0)


def _announce(args: argparse.Namespace, line: str) -> None:
    """A line on standard error, unless ``--quiet``."""
    if not args.quiet:
        print(line, file=sys.stderr, flush=True)


async def _finish(
    args: argparse.Namespace,
    log: EventLog,
    key: SessionKey,
    result: RunResult | None,
    signum: int | None,
    *,
    spec: AgentSpec,
) -> int:
    """Report the run's end (from its result, or its last checkpoint after a signal); run the
    spec's on_exit hook when the run returned (its failure is a warning, never the status)."""
    cp = await _latest(log, key, interrupted=signum is not None)
    own = cp if isinstance(cp, Checkpoint) else None
    summary = (
        result_summary(key, result, own) if result is not None else checkpoint_summary(key, cp)
    )
    summary["priced"] = not (isinstance(cp, Checkpoint) and cp.unpriced)
    if args.json:
        emit_json(summary)
    else:
        _print_summary(summary, utc=args.utc, interrupted=signum is not None)
    if result is not None and (failure := await spec_hook(spec, summary)):
        print(f"warning: {failure}", file=sys.stderr, flush=True)
    if signum is not None:
        return for_signal(signum)
    return for_reason(summary["reason"])


async def _latest(log: EventLog, key: SessionKey, *, interrupted: bool) -> Any:
    """The payload of the session's latest checkpoint (None when it has none). After a signal
    the store has ``_SUMMARY_TIMEOUT`` seconds to answer, as the stop had a bound: a store that
    does not answer makes the summary incomplete (said on standard error), never the exit late
    or its status another."""
    if not interrupted:
        latest = await log.latest_checkpoint(key)
        return latest.payload if latest is not None else None
    try:
        with anyio.move_on_after(_SUMMARY_TIMEOUT):
            latest = await log.latest_checkpoint(key)
            return latest.payload if latest is not None else None
    except EventLogError:  # PostgreSQL keeps the deadline and says so
        pass
    print(
        f"warning: the event log did not answer within {_SUMMARY_TIMEOUT:g} s:"
        " the summary is incomplete",
        file=sys.stderr,
        flush=True,
    )
    return None


def result_summary(
    key: SessionKey, result: RunResult, cp: Checkpoint | None = None
) -> dict[str, Any]:
    """What ``run --json`` prints: the RunResult as a JSON-ready dict, with the session.

    ``cp``, the run's final checkpoint, gives the error as the runtime recorded it (bounded,
    its secrets masked) when it has one; else it is the result's own, as ``Type: message``.
    """
    recorded = cp.error if cp is not None else ""
    raised = f"{type(result.error).__name__}: {result.error}" if result.error else None
    return {
        "session": str(key),
        "reason": result.reason.value,
        "turns": result.turns,
        "input_tokens": result.input_tokens,
        "cached_input_tokens": result.cached_input_tokens,
        "output_tokens": result.output_tokens,
        "cost_usd": usd(result.cost_usd),
        "duration": round(result.duration, 3),
        "done_detail": result.done_detail,
        "final_text": result.final_text,
        "next_wake_at": result.next_wake_at.isoformat() if result.next_wake_at else None,
        "outcome": result.outcome,
        "result": result.result,
        "error": recorded or raised,
    }


def checkpoint_summary(key: SessionKey, cp: Any) -> dict[str, Any]:
    """The same shape as :func:`result_summary`, from a checkpoint (after an interrupt)."""
    ok = isinstance(cp, Checkpoint)
    wake = cp.next_wake_at if ok else None
    return {
        "session": str(key),
        "reason": (cp.stop_reason if ok else None) or StopReason.CONTEXT_CANCELLED.value,
        "turns": cp.turns if ok else 0,
        "input_tokens": cp.input_tokens if ok else 0,
        "cached_input_tokens": cp.cached_input_tokens if ok else 0,
        "output_tokens": cp.output_tokens if ok else 0,
        "cost_usd": usd(cp.cost_usd) if ok else 0.0,
        "duration": None,
        "done_detail": cp.done_detail if ok else "",
        "final_text": cp.final_text if ok else "",
        "next_wake_at": wake.isoformat() if wake else None,
        "outcome": cp.outcome if ok else None,
        "result": cp.result if ok else None,
        "error": (cp.error or None) if ok else None,
    }


def summary_lines(s: Mapping[str, Any], *, utc: bool, interrupted: bool = False) -> list[str]:
    """The end of a run, for people: one ``label  text`` line per fact (labels 10 wide)."""
    rows: list[tuple[str, str]] = [
        ("session", s["session"]),
        ("ended", ended_text(s["reason"], interrupted=interrupted)),
    ]
    if s["done_detail"]:
        rows.append(("detail", s["done_detail"]))
    if s["outcome"]:
        rows.append(("outcome", s["outcome"]))
    rows.append(("turns", str(s["turns"])))
    cached = f" ({s['cached_input_tokens']} cached)" if s["cached_input_tokens"] else ""
    rows.append(("tokens", f"{s['input_tokens']} in{cached} / {s['output_tokens']} out"))
    rows.append(("cost", cost_text(s["cost_usd"], unpriced=not s.get("priced", True))))
    if s["duration"] is not None:
        rows.append(("duration", f"{s['duration']:.1f} s"))
    if s["error"]:
        rows.append(("error", s["error"]))
    if s["next_wake_at"]:
        wake = datetime.fromisoformat(s["next_wake_at"])
        rows.append(("next wake", show_wake(wake, utcnow(), utc=utc)))
    hint = continue_hint(s["session"], s["reason"], interrupted=interrupted)
    if hint:
        rows.append(("next step", hint))
    return [f"{label:<10}{text}" for label, text in rows]


def _print_summary(s: Mapping[str, Any], *, utc: bool, interrupted: bool) -> None:
    """The end of a run, for people, on standard output."""
    for line in summary_lines(s, utc=utc, interrupted=interrupted):
        print(line)
    sys.stdout.flush()


def continue_hint(session: str, reason: str, *, interrupted: bool) -> str:
    """How to go on with a session that stopped for ``reason`` ("" when it completed)."""
    resume = f"autonomous resume {session}"
    if reason == StopReason.COMPLETED:
        return ""
    if reason == StopReason.DEFERRED:
        return f"{resume}   (or leave it to `autonomous daemon`, which resumes it when due)"
    if reason == StopReason.CONTEXT_CANCELLED:
        return resume if interrupted else f"{resume} --force   (it was stopped on purpose)"
    if for_reason(reason) is Exit.BUDGET:
        return f"{resume} --max-turns N / --max-cost USD / --max-wallclock 1h (a larger budget)"
    return resume

"""The spec's completion hook (``on_exit``): a command run when a session's run returns.

``on_exit = ["hooks/alert.sh", "--to", "ops"]`` in a spec is run by ``autonomous run``,
``resume`` and ``daemon`` each time a run of the session returns a result (whatever its stop
reason: completed, deferred, a budget ...); not after SIGINT/SIGTERM stopped the process, whose
sender already knows. It is how an ``alert`` outcome reaches a person.

- No shell: the list is the program and its arguments, as they are. The program is taken as
  ``execvp`` would, from the spec's directory: an absolute path as it is, a path with a ``/``
  relative to the spec's directory, a bare name from ``PATH``. It runs in the spec's directory.
- Its environment is the command's, plus the run's end (see :func:`hook_environment`).
- Its standard output and error go to the command's standard error (standard output is for the
  command's own JSON), its standard input is empty.
- It has :data:`~autonomous.spec._hooks.DEFAULT_TIMEOUT` seconds (``AUTONOMOUS_HOOK_TIMEOUT``,
  seconds or a duration such as ``2m``, changes it; a value that is not a positive duration is
  an error, never ignored); then it is killed.
- ``validate`` (and so ``run``, ``resume`` and the daemon, which are as strict) refuses a spec
  whose hook program is not there or not executable (:func:`~autonomous.spec._hooks.hook_problems`).
- A hook that fails (cannot start, exits non-zero, times out) is reported by the caller and is
  never fatal: the run's exit status is the run's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from scheduler import Clock, SystemClock

from ..spec._hooks import hook_argv, hook_timeout
from ..spec._spec import AgentSpec
from ._decimals import decimal_text, usd


def hook_environment(summary: Mapping[str, Any], spec_path: Path) -> dict[str, str]:
    """The variables a hook gets, from a run's summary (``run --json``'s shape).

    ``AUTONOMOUS_SESSION`` (app/user/session_id), ``AUTONOMOUS_STOP_REASON``,
    ``AUTONOMOUS_OUTCOME`` and ``AUTONOMOUS_DETAIL`` (the done tool's, empty when none),
    ``AUTONOMOUS_TURNS``, ``AUTONOMOUS_COST_USD``, ``AUTONOMOUS_NEXT_WAKE_AT`` (ISO 8601, empty
    when none), ``AUTONOMOUS_ERROR`` (the last turn error, empty when none) and
    ``AUTONOMOUS_SPEC`` (the spec file).
    """
    fields = {
        "SESSION": summary["session"],
        "STOP_REASON": summary["reason"],
        "OUTCOME": summary["outcome"],
        "DETAIL": summary["done_detail"],
        "TURNS": summary["turns"],
        "COST_USD": decimal_text(usd(summary["cost_usd"])),
        "NEXT_WAKE_AT": summary["next_wake_at"],
        "ERROR": summary["error"],
        "SPEC": spec_path,
    }
    return {f"AUTONOMOUS_{k}": "" if v is None else str(v) for k, v in fields.items()}


async def run_hook(
    command: Sequence[str],
    base_dir: Path,
    variables: Mapping[str, str],
    *,
    limit: float | None = None,
    clock: Clock | None = None,
) -> str | None:
    """Run a completion hook to its end (``limit`` seconds at most, on ``clock``: by default
    :func:`hook_timeout` on the system clock); None when it succeeded, else what went wrong.

    Never raises for the hook's own failures (a missing program, a non-zero exit, a timeout);
    cancellation propagates, the hook killed.
    """
    if not command or not command[0].strip():
        return "on_exit hook has no program"
    argv = hook_argv(command, base_dir)
    try:
        seconds = hook_timeout() if limit is None else limit
    except ValueError as exc:  # checked before the run too: the environment changed since
        return f"on_exit hook {argv[0]} not run: {exc}"
    sys.stderr.flush()
    try:
        process = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=_output(),
            stderr=_output(),
            cwd=base_dir,
            env={**os.environ, **variables},
        )
    except OSError as exc:
        return f"on_exit hook {argv[0]} could not start: {exc.strerror or exc}"
    async with process:  # on cancellation or timeout: killed and reaped
        with (clock or SystemClock()).move_on_after(seconds):
            status = await process.wait()
            return None if status == 0 else f"on_exit hook {argv[0]} exited with status {status}"
        process.kill()
    return f"on_exit hook {argv[0]} did not finish within {seconds:g} s: killed"


def _output() -> int:
    """Where a hook's output goes: this process's standard error (or nowhere without one)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a replaced stderr (tests, embedding)
        return subprocess.DEVNULL


async def spec_hook(
    spec: AgentSpec, summary: Mapping[str, Any], *, clock: Clock | None = None
) -> str | None:
    """Run the spec's ``on_exit`` hook (if it has one) for a run that ended as ``summary`` says;
    None when there is none or it succeeded, else what went wrong."""
    if not spec.on_exit:
        return None
    variables = hook_environment(summary, spec.path)
    return await run_hook(spec.on_exit, spec.base_dir, variables, clock=clock)

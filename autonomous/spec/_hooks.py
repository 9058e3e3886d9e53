"""The spec's completion hook (``on_exit``) checked before any run: its program, its timeout.

Running the hook is the command's (``autonomous/_cli/_hooks.py``, which says how a hook runs);
what ``validate`` refuses, and the program and timeout a run uses, are decided here.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._durations import parse_duration

#: Seconds a hook may run before it is killed.
DEFAULT_TIMEOUT = 30.0
#: The variable that overrides :data:`DEFAULT_TIMEOUT`.
TIMEOUT_VARIABLE = "AUTONOMOUS_HOOK_TIMEOUT"


def hook_argv(command: Sequence[str], base_dir: Path) -> list[str]:
    """The command with its program found from ``base_dir`` (a bare name is left to ``PATH``)."""
    program = command[0]
    if "/" in program or (os.altsep is not None and os.altsep in program):
        program = os.fspath(base_dir / program)
    return [program, *command[1:]]


def hook_timeout(environ: Mapping[str, str] = os.environ) -> float:
    """The hook timeout: ``AUTONOMOUS_HOOK_TIMEOUT`` when set, else :data:`DEFAULT_TIMEOUT`.

    A value that is not a positive duration (seconds, or ``30s``, ``2m`` ...) is a
    :class:`ValueError` naming the variable: a typo must not leave a hook its default.
    """
    text = environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        seconds = parse_duration(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(
            f"{TIMEOUT_VARIABLE}={text!r} is not a positive duration (seconds, or 30s, 2m):"
            " fix it or unset it (the default is"
            f" {DEFAULT_TIMEOUT:g} s)"
        )
    return seconds


def hook_problems(command: Sequence[str], base_dir: Path) -> list[str]:
    """What keeps a hook command from running, found before any run: its program missing
    (from ``base_dir`` as :func:`hook_argv` takes it, or on ``PATH``) or not executable, and
    a bad ``AUTONOMOUS_HOOK_TIMEOUT``; [] when it can run."""
    found: list[str] = []
    program = command[0] if command else ""
    if not program.strip():
        found.append("the hook has no program")
    else:
        found.extend(_program_problems(program, hook_argv(command, base_dir)[0]))
    try:
        hook_timeout()
    except ValueError as exc:
        found.append(str(exc))
    return found


def _program_problems(written: str, program: str) -> list[str]:
    """Why ``program`` (``written`` so in the spec) cannot be started, if it cannot."""
    if program == written and os.sep not in written and "/" not in written:
        if shutil.which(program) is None:
            return [f"program {written!r} not found on PATH"]
        return []
    if not os.path.isfile(program):
        return [f"program {written!r} not found (at {program})"]
    if not os.access(program, os.X_OK):
        return [f"program {written!r} is not executable (chmod +x {program})"]
    return []

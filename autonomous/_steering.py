"""Steering and skill files: load them from the agent's own directory, or check them statically.

An agent may only read markdown files inside its own directory (``base_dir``). Each declared path
is resolved (relative paths against ``base_dir``, symlinks and ``..`` followed by
:meth:`pathlib.Path.resolve`) and refused when the result lies outside ``base_dir``: that is what
keeps one agent from reading another agent's files.

Two entry points share one set of rules:

- :func:`load_scoped` is the run-time loader. A file that is out of scope, missing or unreadable is
  skipped and logged as a warning (``steering_file_skipped``, with the path and the reason, never
  the file's contents); a run never fails because of a steering file.
- :func:`check_scoped` is the static check (``autonomous validate``). The same cases, and entries
  that are not paths at all, are errors: a path that would load nothing at run time fails
  validation instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

import attrs

from ._logging import get_logger

__all__ = ["LoadedFile", "LoadedFiles", "Problem", "Severity", "check_scoped", "load_scoped"]

_log = get_logger("autonomous.steering")

#: How bad a problem is: an ``error`` fails validation, a ``warning`` does not.
Severity = Literal["error", "warning"]


@attrs.frozen
class Problem:
    """One steering or skill file that cannot be used: how bad, which path, and why."""

    severity: Severity = attrs.field(validator=attrs.validators.in_(("error", "warning")))
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.path}: {self.message}"


@attrs.frozen
class LoadedFile:
    """One file read from the agent's directory: its name as declared, where it is, its text."""

    name: str
    path: Path
    text: str = attrs.field(repr=False)


@attrs.frozen
class LoadedFiles:
    """What :func:`load_scoped` read, in the declared order, and the files it skipped (why)."""

    files: tuple[LoadedFile, ...] = ()
    problems: tuple[Problem, ...] = ()


def load_scoped(
    paths: Iterable[str | os.PathLike[str]],
    base_dir: str | os.PathLike[str],
    *,
    kind: str = "steering",
) -> LoadedFiles:
    """Read each file of ``paths`` that lies inside ``base_dir``; skip and log the others.

    Skipped files come back as warnings in :attr:`LoadedFiles.problems`; each is also logged as
    ``steering_file_skipped`` (with ``kind``, the path and the reason) on the
    ``autonomous.steering`` logger. Nothing raises: a bad entry is never fatal at run time.
    """
    paths = tuple(paths)
    if not paths:  # the common case: nothing to resolve (resolving costs syscalls per run)
        return LoadedFiles()
    base = Path(base_dir).resolve()
    files: list[LoadedFile] = []
    problems: list[Problem] = []
    for entry in paths:
        loaded = _read(entry, base)
        if isinstance(loaded, LoadedFile):
            files.append(loaded)
            continue
        problem = Problem("warning", _show(entry), loaded)
        _log.warning("steering_file_skipped", kind=kind, path=problem.path, reason=problem.message)
        problems.append(problem)
    return LoadedFiles(tuple(files), tuple(problems))


def check_scoped(paths: object, base_dir: str | os.PathLike[str]) -> list[Problem]:
    """The errors :func:`load_scoped` would turn into skipped files, for static validation.

    ``paths`` is whatever a spec declared: anything but a list of strings or paths, a path
    outside ``base_dir``, a missing file and an unreadable one are each an error. Logs nothing.
    """
    if isinstance(paths, str | bytes | os.PathLike | Mapping) or not isinstance(paths, Iterable):
        return [Problem("error", _show(paths), "expected a list of file paths")]
    base = Path(base_dir).resolve()
    problems: list[Problem] = []
    for entry in paths:
        loaded = _read(entry, base)
        if not isinstance(loaded, LoadedFile):
            problems.append(Problem("error", _show(entry), loaded))
    return problems


def _read(entry: object, base: Path) -> LoadedFile | str:
    """The file ``entry`` names inside ``base`` (already resolved), or why it cannot be used."""
    raw = _as_text(entry)
    if raw is None:
        return f"not a file path: a {type(entry).__name__}"
    if not raw.strip():
        return "not a file path: blank"
    declared = Path(raw)
    try:
        resolved = (base / declared).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, or a path the OS rejects
        return f"cannot be resolved ({type(exc).__name__})"
    if not resolved.is_relative_to(base):
        return f"outside the agent's directory {base}: refused"
    try:
        if not resolved.exists():
            return "does not exist"
        if not resolved.is_file():
            return "is not a file"
        text = resolved.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "cannot be read: not UTF-8 text"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or type(exc).__name__}"
    return LoadedFile(declared.name, resolved, text)


def _as_text(entry: object) -> str | None:
    """``entry`` as a text path, or None when it is not a ``str`` or a text path-like."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, os.PathLike):
        path = os.fspath(entry)
        return path if isinstance(path, str) else None
    return None


def _show(entry: object) -> str:
    """How a declared entry appears in a problem and in the log."""
    raw = _as_text(entry)
    return repr(entry) if raw is None else raw

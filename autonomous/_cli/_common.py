"""What the CLI's commands share: the log, session names, the spec note."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeVar

import anyio
import attrs

from eventlog import Event as LogEvent
from eventlog import (
    EventKind,
    EventLog,
    Note,
    SessionKey,
    SessionRef,
    SqliteEventLog,
    process_alive,
)

from .._errors import ConfigurationError
from .._models._import import import_litellm
from ..spec._spec import AgentSpec
from ..spec._validate import validated_spec
from ._decimals import decimal_text
from ._exits import Exit

T = TypeVar("T")

#: The text of the note that records which spec file a session runs (its data holds the path).
SPEC_NOTE = "agent spec"


class CliError(Exception):
    """A problem the CLI reports in one line and exits on (``code`` is the exit status)."""

    def __init__(self, message: str, code: int = Exit.USAGE) -> None:
        super().__init__(message)
        self.code = code


class CliLog(EventLog, Protocol):
    """What the commands need of an event log: the protocol, ``async with``, and ``count``."""

    async def __aenter__(self) -> Self:
        """Open the log."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the log."""

    async def count(self, key: SessionKey) -> int:
        """How many events the session has."""


#: The URL schemes of a PostgreSQL log (``--db postgresql://host/db``).
POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})
#: What a user without the PostgreSQL driver installs.
POSTGRES_EXTRA = "pip install 'bounded-autonomous[postgres]'"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def open_log(args: argparse.Namespace, *, create: bool = False) -> CliLog:
    """The ``--db`` event log: a PostgreSQL URL (``postgresql://`` or ``postgres://``) or a
    SQLite path; commands that only read or control sessions never create a SQLite file."""
    found = _SCHEME.match(args.db)
    if found is not None:
        scheme = found.group(1).lower()
        if scheme not in POSTGRES_SCHEMES:
            raise CliError(
                f"--db {scheme}://... is not a store this runtime has: "
                "give a SQLite path or a postgresql:// URL"
            )
        return _postgres_log(args.db)
    path = Path(args.db)
    if not create and not path.exists():
        raise CliError(f"no event log at {path} (pass --db, or run an agent first)")
    return SqliteEventLog(path)


def _postgres_log(url: str) -> CliLog:
    """A PostgresEventLog on ``url``; its driver imported only now (an optional extra)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise CliError(
            f"--db is a PostgreSQL URL but its driver is not installed ({exc}): {POSTGRES_EXTRA}",
            Exit.STORE,
        ) from None
    from eventlog import PostgresEventLog

    log: CliLog = PostgresEventLog(url)
    return log


async def resolve_session(log: EventLog, text: str) -> SessionKey:
    """``app/user/session_id``, or a session id that names exactly one session in the log."""
    parts = text.split("/")
    if len(parts) == 3 and all(parts):
        return SessionKey(*parts)
    if len(parts) != 1 or not text:
        raise CliError(f"{text!r} is not a session: give app/user/session_id or a session id")
    matches = [s.key for s in await log.sessions() if s.key.session_id == text]
    if not matches:
        raise CliError(f"no session {text!r} in the log: give app/user/session_id", Exit.ERROR)
    if len(matches) > 1:
        names = ", ".join(str(k) for k in matches)
        raise CliError(f"session id {text!r} is ambiguous ({names}): give app/user/session_id")
    return matches[0]


async def require_session(log: EventLog, key: SessionKey) -> None:
    """Refuse a session that has no event at all (a typo would create a phantom session)."""
    if not await log.read(key, limit=1):
        raise CliError(f"session {key} has no events in this log")


async def record_spec(log: EventLog, key: SessionKey, spec: AgentSpec, model: str | None) -> None:
    """Note in the session which spec file (its absolute path, and its identity: the digest of
    its bytes) and model override run it, for resume and the daemon; the newest such note is
    the one that counts."""
    data = {"spec": str(spec.path.absolute()), "model": model, "digest": spec.identity}
    await log.append([LogEvent.create(key, Note(SPEC_NOTE, data), author="cli")])


async def spec_note(log: EventLog, key: SessionKey) -> dict[str, Any] | None:
    """The data of the session's newest spec note (None when it has none)."""
    for event in reversed(await log.read_last(key, [EventKind.NOTE], 100)):
        payload = event.payload
        if isinstance(payload, Note) and isinstance(payload.data.get("spec"), str):
            return dict(payload.data)
    return None


async def spec_of_session(
    log: EventLog,
    key: SessionKey,
    *,
    changed: Literal["adopt", "refuse"] = "adopt",
    load: Callable[[str, str | None], AgentSpec] | None = None,
) -> AgentSpec:
    """The spec a session was started from (its newest spec note), loaded again.

    A missing file, or a session with no note (started from Python), is a :class:`CliError`
    that says how to adopt a spec: ``autonomous resume SESSION --spec PATH``. A file whose
    identity is not the one the note recorded (it was edited, or this host has another copy)
    is adopted (recorded as the session's spec from now on: ``resume``, an operator's choice),
    or with ``changed="refuse"`` a :class:`CliError` saying so (a daemon: another worker
    may have the recorded spec). ``load`` loads the file, with the session's model override
    (:func:`load_session_spec` unless given: a daemon's :class:`~autonomous.spec._cache.SpecCache`).
    """
    note = await spec_note(log, key)
    if note is None:
        raise CliError(
            f"session {key} records no agent spec (it was not started by `autonomous run`): "
            f"adopt one with autonomous resume {key} --spec PATH"
        )
    path = note["spec"]
    if not await anyio.Path(path).exists():
        raise CliError(
            f"spec file {path} is missing: adopt it with autonomous resume {key} --spec NEW_PATH"
        )
    model = note.get("model")
    spec = (load or load_session_spec)(path, model if isinstance(model, str) else None)
    recorded = note.get("digest")
    if isinstance(recorded, str) and recorded != spec.identity:
        if changed == "adopt":
            return await adopt_spec(log, key, path)
        raise CliError(
            f"spec file {path} differs from the one session {key} recorded "
            f"({_short(recorded)}, here {_short(spec.identity)}): this worker leaves it; "
            f"deploy the recorded spec here, or record this one for the session (it runs "
            f"nothing) with autonomous adopt --spec {path} {key}"
        )
    return spec


def _short(identity: str) -> str:
    """A spec identity as shown in a message: its kind and the first 12 hex digits."""
    kind, _, digest = identity.partition(":")
    return f"{kind}:{digest[:12]}" if digest else identity


async def adopt_spec(log: EventLog, key: SessionKey, path: str) -> AgentSpec:
    """The spec at ``path`` for an existing session, recorded as its spec from now on (resume
    and the daemon use it); the session's model override, if any, is kept.

    A spec that does not load or build is refused (a :class:`CliError`, exit 2) and nothing is
    recorded; the same path and identity as the recorded ones record nothing new.
    """
    await require_session(log, key)
    spec, _ = await adopt_loaded(log, key, load_spec_or_fail(path))
    return spec


async def adopt_loaded(log: EventLog, key: SessionKey, spec: AgentSpec) -> tuple[AgentSpec, bool]:
    """Record ``spec`` (loaded and checked) as the session's spec from now on, its model
    override kept; the spec as the session runs it, and whether anything was recorded (not
    when the session records this path and identity already).

    A spec whose tools or model do not import is refused (a :class:`CliError`), nothing
    recorded.
    """
    note = await spec_note(log, key)
    model = note.get("model") if note else None
    model = model if isinstance(model, str) else None
    if model is not None:
        spec = attrs.evolve(spec, model=model)
    with cli_errors():  # its tools and model import now: a broken spec is never recorded
        spec.build_function(SessionRef(log, key.app, key.user, key.session_id))
    if (
        note is not None
        and note["spec"] == str(spec.path.absolute())
        and note.get("digest") == spec.identity
    ):
        return spec, False
    await record_spec(log, key, spec, model)
    return spec, True


def load_session_spec(path: str, model: str | None) -> AgentSpec:
    """The spec at ``path`` (:func:`load_spec_or_fail`), with ``model`` in place of its own
    model when given (a session's override)."""
    spec = load_spec_or_fail(path)
    return attrs.evolve(spec, model=model) if model is not None else spec


def load_spec_or_fail(path: str | os.PathLike[str]) -> AgentSpec:
    """The spec at ``path`` as strict as ``validate`` (every error at once, with its line), its
    errors turned into a CLI error."""
    try:
        return validated_spec(path, interactive=False)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from exc


async def prepare_litellm(spec: AgentSpec) -> None:
    """Import litellm (in a thread) with its bundled catalogs and its debug banner off."""
    if not spec.scripted:
        await import_litellm()


def single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error inside a task group's exception group (or the group when there are more)."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


def holder_gone(holder: str) -> bool:
    """Whether a lease holder (``host:pid:token``) is a process of this host that has exited.

    Such a lease is taken over at once, so its session is worth trying; any other holder may be
    alive and is left alone.
    """
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) <= 0:
        return False
    return not process_alive(int(pid_text))  # a zombie counts as gone, as for the store


def json_text(value: Any) -> str:
    """``value`` as JSON text, as ``json.dumps`` writes it (times and paths as text, anything
    else by repr), except that every float is written positional (:func:`decimal_text`), so a
    cost reads ``0.000027``: people read this output too, and jq and json parse it the same."""
    if isinstance(value, float):
        return decimal_text(value) if math.isfinite(value) else json.dumps(value)
    if isinstance(value, dict):
        items = (f"{_json_key(k)}: {json_text(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    if value is None or isinstance(value, str | int):  # bool is an int
        return json.dumps(value, ensure_ascii=False)
    return json_text(_json_default(value))


def _json_key(key: Any) -> str:
    """A dict key as JSON text: a string, or a scalar turned into one as ``json.dumps`` does."""
    if not isinstance(key, str):
        if key is not None and not isinstance(key, int | float):
            raise TypeError(f"keys must be str, int, float, bool or None, not {type(key)}")
        key = json.dumps(key)
    return json.dumps(key, ensure_ascii=False)


def emit_json(value: Any) -> None:
    """Print ``value`` as one JSON document on standard output (:func:`json_text`)."""
    print(json_text(value), flush=True)


def _json_default(value: Any) -> Any:
    """JSON for the values json does not know: times, paths, anything else by repr."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return repr(value)


def one_line(text: str, width: int | None) -> str:
    """``text`` on one line (newlines shown as spaces), cut to ``width`` characters with '…'."""
    flat = " ".join(text.split())
    if width is not None and len(flat) > width:
        return flat[: max(width - 1, 0)] + "…"
    return flat


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn the library's misuse errors into :class:`CliError`."""
    try:
        yield
    except ConfigurationError as exc:
        raise CliError(str(exc)) from exc

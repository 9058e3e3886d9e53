"""TerminalPrompter: asks y/N on a terminal (or any text streams) for the CLI."""

from __future__ import annotations

import json
import sys
import threading
from typing import Protocol

import anyio

from ._request import PermissionRequest

MAX_ARGUMENTS_CHARS = 200
_YES = frozenset({"y", "yes"})


def _printable(text: str) -> str:
    """Escape control characters so model-chosen text cannot drive the terminal."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _summary(arguments: object) -> str:
    text = json.dumps(arguments, ensure_ascii=False, default=repr, sort_keys=True)
    return _bounded(_printable(text))


def _bounded(text: str) -> str:
    """``text`` cut to :data:`MAX_ARGUMENTS_CHARS`, ending in an ellipsis when cut."""
    if len(text) > MAX_ARGUMENTS_CHARS:
        text = text[: MAX_ARGUMENTS_CHARS - 1] + "…"
    return text


def render_request(request: PermissionRequest) -> str:
    """The question printed for ``request``: tool, read-only or destructive flag, the other
    names the tool is known by (an MCP tool's own and its server's), caller, short arguments."""
    caller = request.caller
    who = (_printable(caller.identity) if caller else "") or "(unknown)"
    if caller is not None and caller.admin:
        who += " [admin]"
    read_only = " (read-only)" if request.read_only else ""
    if request.destructive and not request.read_only:
        read_only = " (destructive: may delete or overwrite)"
    lines = [f"permission requested: tool {_printable(request.tool)}{read_only}"]
    if aliases := request.names[1:]:
        # A server chooses its tools' names: shown escaped, and bounded like the arguments.
        lines.append(f"  also known as: {_bounded(_printable(', '.join(aliases)))}")
    lines += [f"  caller: {who}", f"  arguments: {_summary(dict(request.arguments))}"]
    return "\n".join(lines) + "\nallow? [y/N] "


class LineSource(Protocol):
    """Where answers come from: anything with a text ``readline`` (``sys.stdin``, ``StringIO``)."""

    def readline(self) -> str:
        """Return the next line, or ``""`` at end of input."""
        ...


class TextSink(Protocol):
    """Where questions go: anything with text ``write`` and ``flush`` (``sys.stderr``)."""

    def write(self, text: str, /) -> object:
        """Write ``text``."""
        ...

    def flush(self) -> None:
        """Push written text out."""
        ...


class _PendingLine:
    """One blocking ``readline`` in a worker thread, which may outlive the prompt that began it."""

    def __init__(self, stream: LineSource) -> None:
        self._stream = stream
        self.done = threading.Event()
        self.line = ""
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self.line = self._stream.readline()
        except Exception as exc:  # reported to the awaiting prompt, which re-raises it
            self.error = exc
        finally:
            self.done.set()


class TerminalPrompter:
    """Asks on ``stream_out`` whether a tool call may run and reads the answer from ``stream_in``.

    The defaults (``None``) mean ``sys.stdin`` and ``sys.stderr`` as they are at prompt time.
    A line ``y`` or ``yes`` (any case) allows; anything else, end of input included, denies.
    Reading runs in a worker thread (``anyio.to_thread``), so a gate timeout or cancellation
    ends the prompt at once. The blocked read is then kept for the next prompt rather than
    started twice; a line that arrives before the next question is printed answered the old
    question and is discarded, so a late "y" never approves a different call. Prompts are
    asked one at a time.
    """

    def __init__(
        self, stream_in: LineSource | None = None, stream_out: TextSink | None = None
    ) -> None:
        self._stream_in = stream_in
        self._stream_out = stream_out
        self._lock = anyio.Lock()
        self._pending: _PendingLine | None = None

    async def __call__(self, request: PermissionRequest, /) -> bool:
        """Print the question for ``request`` and return True when the answer is y or yes."""
        async with self._lock:
            pending = self._pending
            if pending is not None and pending.done.is_set():
                pending = None  # answered a question that timed out: stale
            out = self._stream_out if self._stream_out is not None else sys.stderr
            out.write(render_request(request))
            out.flush()
            if pending is None:
                pending = _PendingLine(
                    self._stream_in if self._stream_in is not None else sys.stdin
                )
                self._pending = pending
                await anyio.to_thread.run_sync(pending.run, abandon_on_cancel=True)
            else:
                await anyio.to_thread.run_sync(pending.done.wait, abandon_on_cancel=True)
            self._pending = None
            if pending.error is not None:
                raise pending.error
            return pending.line.strip().lower() in _YES

"""Standard output and error that survive a reader going away (``autonomous ls | head``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast


class PipeSafe:
    """A text stream whose writes stop quietly once its pipe is closed.

    The first ``BrokenPipeError`` points the file descriptor at ``/dev/null`` (so the
    interpreter's last flush does not fail either) and drops every later write: the command
    goes on and exits with its own status, a run's included, without a traceback.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        """Write ``text``, or drop it once the pipe is closed."""
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._broke()
        return len(text)

    def flush(self) -> None:
        """Flush, unless the pipe is closed."""
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._broke()

    def _broke(self) -> None:
        self.broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # no descriptor (a test's StringIO): dropping is enough
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def pipe_safe_output() -> Iterator[None]:
    """Standard output and error as :class:`PipeSafe` streams for the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, PipeSafe(sys.stdout))
    sys.stderr = cast(TextIO, PipeSafe(sys.stderr))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved

"""Where refused requests are reported: the open :func:`watch_rejections` blocks."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ._rules import Rejection

__all__ = ["report_rejection", "watch_rejections"]

# The open watch_rejections blocks, innermost last; handler threads report into them.
_watches: list[list[Rejection]] = []
_watches_lock = threading.Lock()


@contextlib.contextmanager
def watch_rejections() -> Iterator[list[Rejection]]:
    """Collect every request refused (by a ScriptedServer or ScriptedModel) inside the block.

    Blocks nest: a refusal goes to the innermost open block only, so a test that provokes one
    on purpose can take it in its own block and leave a suite-wide watch clean.
    """
    seen: list[Rejection] = []
    with _watches_lock:
        _watches.append(seen)
    try:
        yield seen
    finally:
        with _watches_lock:
            # By identity: two empty lists are equal, and an outer block must stay open.
            del _watches[next(i for i, w in enumerate(_watches) if w is seen)]


def report_rejection(rejection: Rejection) -> None:
    """Hand ``rejection`` to the innermost open :func:`watch_rejections` block, if any."""
    with _watches_lock:
        if _watches:
            _watches[-1].append(rejection)

"""The library's loggers: structlog's configuration when the program made one, else stdlib logging.

structlog unconfigured prints every event on standard output, which is the program's, not
ours. A library must not call ``structlog.configure`` either (the program's configuration is
the program's). So each logger here decides when it is used: once anything has called
``structlog.configure`` (the ``autonomous`` command does, so does ``structlog.testing``), it is
``structlog.get_logger(name)``, exactly as before; until then, it hands each event to the
standard ``logging`` logger of the same name (``autonomous``, ``autonomous.supervisor``, ...)
as one line, ``event key=value ...``. A program that sets up no logging then sees nothing on
standard output (Python's last-resort handler writes warnings and errors to standard error),
and one that calls ``logging.basicConfig(level=logging.INFO)`` sees the events there.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any, cast

import structlog
from structlog.typing import FilteringBoundLogger, Processor

__all__ = ["get_logger"]


def get_logger(name: str) -> FilteringBoundLogger:
    """The library's logger ``name``: see the module docstring for where its events go."""
    return cast(FilteringBoundLogger, _LibraryLogger(name))


class _LibraryLogger:
    """Each use goes to structlog's configured logger if there is a configuration, else to a
    structlog logger over ``logging.getLogger(name)``. ``bind`` decides once, for the bound
    logger it returns (a run binds when it starts)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._stdlib: Any = None

    def _target(self) -> Any:
        if structlog.is_configured():
            return structlog.get_logger(self._name)
        if self._stdlib is None:
            self._stdlib = structlog.wrap_logger(
                logging.getLogger(self._name),
                processors=_STDLIB_PROCESSORS,
                wrapper_class=structlog.stdlib.BoundLogger,
            )
        return self._stdlib

    def bind(self, **fields: Any) -> Any:
        """A logger with ``fields`` bound, on the target this logger has now."""
        return self._target().bind(**fields)

    def __getattr__(self, name: str) -> Any:  # info, warning, is_enabled_for, ...
        return getattr(self._target(), name)


def _render(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The event as the stdlib call's one message, ``event key=value ...``; a traceback or
    stack asked for stays the stdlib's to format."""
    kwargs = {key: event_dict.pop(key) for key in ("exc_info", "stack_info") if key in event_dict}
    event = str(event_dict.pop("event", ""))
    fields = " ".join(f"{key}={_text(value)}" for key, value in event_dict.items())
    return ((f"{event} {fields}" if fields else event,), kwargs)


def _text(value: Any) -> str:
    """A field's value in the line: text quoted (a str enum as its value), others as repr."""
    return repr(str(value)) if isinstance(value, str) else repr(value)


_STDLIB_PROCESSORS: list[Processor] = [
    structlog.stdlib.filter_by_level,  # first: an event nobody listens to costs no rendering
    structlog.contextvars.merge_contextvars,  # what the program bound, as structlog's default
    _render,
]

"""The daemon's report lines, and its one JSON-lines stream for log shippers (``daemon --json``).

With ``--json`` every line on standard output is one JSON object with ``timestamp`` (ISO 8601,
UTC, ``Z``), ``level``, ``event`` and the event's fields: the daemon's own report lines, the
library's structured logs (structlog, shown with ``-v``) and stdlib logging's records alike.
Without it the report lines are for people and the logs go to standard error as usual.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from ._common import emit_json
from ._decimals import decimal_text
from ._times import show_time

#: ``report(event, **fields)``: how the daemon tells what it does.
Report = Callable[..., None]

#: The level of a report line that is not ``info``.
_LEVELS = {"failed": "error", "hook_failed": "warning", "store_unavailable": "warning"}


def timestamp() -> str:
    """Now, as structlog's ISO time stamper writes it (UTC, ending in ``Z``)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def reporter(as_json: bool, *, utc: bool = False) -> Report:
    """Report lines on standard output: JSON lines with ``--json``, else readable text (each
    line starting with its date, time and zone, local unless ``utc``).

    A report line is printed, never logged as well: ``-v`` sends the logs to standard error,
    which a terminal shows beside standard output, and each report would be there twice.
    """

    def report(event: str, **fields: Any) -> None:
        """Print ``event`` with its fields."""
        if as_json:
            level = _LEVELS.get(event, "info")
            emit_json({"timestamp": timestamp(), "level": level, "event": event, **fields})
            return
        shown = " ".join(f"{k}={_text(v)}" for k, v in fields.items() if v is not None)
        print(f"{show_time(datetime.now(UTC), utc=utc)} {event} {shown}".rstrip(), flush=True)

    return report


def _text(value: Any) -> str:
    """A report field as a text line shows it: a float positional (a cost as 0.000027)."""
    return decimal_text(value) if isinstance(value, float) else str(value)


class JsonLinesFormatter(logging.Formatter):
    """A stdlib log record as one JSON line with the structlog lines' keys."""

    def format(self, record: logging.LogRecord) -> str:
        """``{"timestamp", "level", "event", "logger"}`` (and ``exception`` when there is one)."""
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC)
            .isoformat()
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
            "logger": record.name,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=repr)


def json_lines_logging(verbose: int) -> None:
    """Send structlog and stdlib logging to standard output as JSON lines (``daemon --json``).

    Replaces the CLI's set-up of :func:`autonomous._cli._main.configure_logging`, before the
    daemon logs anything; ``verbose`` sets the level as there.
    """
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(default=repr, ensure_ascii=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonLinesFormatter())
    logging.basicConfig(level=max(level, logging.WARNING), handlers=[handler], force=True)

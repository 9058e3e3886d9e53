"""A CLI run's progress on standard error: a live status line on a terminal, plain lines when
standard error is a file or a pipe.

Both print one line per finished turn, pause, resume, scheduled sleep and wake. On a terminal a
status line below them says what the run does at this moment (calls the model, runs a tool,
sleeps until a time), for how long, and what is spent and left of the budgets; it is drawn by
``rich`` (which redraws it in place) and erased when the run ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from eventlog import Checkpoint
from permissions import Gate, TerminalPrompter
from scheduler import Clock, SystemClock

from .._progress import (
    HistorySummarized,
    ModelCalled,
    ModelCalling,
    Paused,
    ProgressEvent,
    Resumed,
    RunExited,
    Sleeping,
    ToolCalled,
    ToolCalling,
    TurnFinished,
    TurnStarted,
    Woke,
)
from ._times import show_span, show_time, show_wake

#: The default of ``max_turns`` when a spec leaves it out (as :func:`make_options` has it).
_MAX_TURNS = 50


class PlainProgress:
    """The ``progress`` callback of a CLI run: a line per turn with totals and budgets left,
    and a line per pause, resume, sleep and wake. Also a (no-op) context manager, as
    :class:`LiveStatus` is one."""

    def __init__(
        self,
        options: Mapping[str, Any],
        start: Checkpoint | None,
        stream: IO[str],
        *,
        clock: Clock | None = None,
        utc: bool = False,
    ) -> None:
        self._options = options
        self._stream = stream
        self._clock = clock or SystemClock()
        self._utc = utc
        self._started = self._clock.monotonic()
        self.turn = start.turns if start else 0
        self.input_tokens = start.input_tokens if start else 0
        self.output_tokens = start.output_tokens if start else 0
        self.cost_usd = start.cost_usd if start else 0.0

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def __call__(self, turn: int, event: ProgressEvent) -> None:
        """Account a model call (a summary call too); print the line an event has, if any."""
        if isinstance(event, ModelCalled | HistorySummarized):
            self.input_tokens += event.input_tokens
            self.output_tokens += event.output_tokens
            self.cost_usd += event.cost_usd
        elif isinstance(event, TurnStarted):
            self.turn = event.turn
        line = self.line_for(event)
        if line is not None:
            self.print(line)

    def line_for(self, event: ProgressEvent) -> str | None:
        """The lasting line of an event (a finished turn, pause, resume, sleep or wake)."""
        if isinstance(event, TurnFinished):
            failed = f" | failed: {event.error}" if event.error else ""
            return (
                f"turn {event.turn} | tokens {self.input_tokens} in / {self.output_tokens} out"
                f" | ${self.cost_usd:.6f} | left: {self.left(event.turn)}{failed}"
            )
        if isinstance(event, Paused):
            return f"paused before turn {event.turn}"
        if isinstance(event, Resumed):
            return f"resumed before turn {event.turn}"
        if isinstance(event, Sleeping):
            return f"next turn {show_wake(event.until, self._clock.now(), utc=self._utc)}"
        if isinstance(event, Woke):
            return f"woke after turn {event.turn}"
        return None

    def elapsed(self) -> float:
        """Seconds since this run started here."""
        return self._clock.monotonic() - self._started

    def left(self, turn: int) -> str:
        """What is left of each budget that is set."""
        o = self._options
        parts = []
        if o.get("max_turns", _MAX_TURNS):
            turns = o.get("max_turns", _MAX_TURNS) - turn
            parts.append(f"{turns} turn{'' if turns == 1 else 's'}")
        if o.get("max_cost_usd"):
            parts.append(f"${o['max_cost_usd'] - self.cost_usd:.4f}")
        if o.get("max_wallclock"):
            parts.append(show_span(o["max_wallclock"] - self.elapsed()))
        if o.get("max_input_tokens"):
            parts.append(f"{o['max_input_tokens'] - self.input_tokens} in-tokens")
        if o.get("max_output_tokens"):
            parts.append(f"{o['max_output_tokens'] - self.output_tokens} out-tokens")
        return ", ".join(parts) or "unbounded"

    def print(self, line: str) -> None:
        """One lasting line on the stream, flushed."""
        print(line, file=self._stream, flush=True)


class LiveStatus(PlainProgress):
    """The lasting lines of :class:`PlainProgress`, and below them a status line redrawn in
    place: what the run does now and for how long, the turn, the time it has run, what it
    spent and what is left. Use it as a context manager around the run."""

    def __init__(
        self,
        options: Mapping[str, Any],
        start: Checkpoint | None,
        console: Console,
        *,
        clock: Clock | None = None,
        utc: bool = False,
        auto_refresh: bool = True,
    ) -> None:
        super().__init__(options, start, console.file, clock=clock, utc=utc)
        self._doing = "starting"
        self._since = self._started
        self._live = Live(
            console=console,
            get_renderable=self.render,
            auto_refresh=auto_refresh,
            refresh_per_second=2,  # elapsed times are shown in seconds
            transient=True,  # the run's summary replaces it
        )

    def __enter__(self) -> LiveStatus:
        self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._live.stop()

    def __call__(self, turn: int, event: ProgressEvent) -> None:
        """Say what the run does now; account and print as :class:`PlainProgress` does."""
        doing = self._doing_after(event)
        if doing is not None:
            self._doing, self._since = doing, self._clock.monotonic()
        super().__call__(turn, event)
        self._live.refresh()

    def _doing_after(self, event: ProgressEvent) -> str | None:
        """What the run does after ``event`` (None: what it did before)."""
        if isinstance(event, ModelCalling):
            return f"calling {event.model}"
        if isinstance(event, ToolCalling):
            return f"running {event.tool}"
        if isinstance(event, ModelCalled | HistorySummarized | ToolCalled | TurnStarted):
            return "working"
        if isinstance(event, Sleeping):
            return f"sleeping until {show_time(event.until, utc=self._utc)}"
        if isinstance(event, TurnFinished | Woke | Resumed):
            return "between turns"
        if isinstance(event, Paused):
            return "paused"
        if isinstance(event, RunExited):
            return f"exiting: {event.reason}"
        return None

    def status(self) -> str:
        """The status line's text, the parts that matter most first (a narrow terminal cuts
        the end)."""
        now = self._clock.monotonic()
        return (
            f"{self._doing} {show_span(now - self._since)} | turn {self.turn}"
            f" | {show_span(self.elapsed())} elapsed | ${self.cost_usd:.6f}"
            f" | left: {self.left(self.turn)}"
            f" | tokens {self.input_tokens} in / {self.output_tokens} out"
        )

    def render(self) -> Text:
        """The status line for ``rich``: one line, cut to the terminal's width."""
        return Text(self.status(), no_wrap=True, overflow="ellipsis")

    def print(self, line: str) -> None:
        """One lasting line above the status line."""
        self._live.console.print(Text(line), highlight=False)


def may_prompt(options: Mapping[str, Any]) -> bool:
    """Whether the run's permission gate may ask on this terminal (a redrawn status line would
    hide its question, so such a run gets plain lines)."""
    gate = options.get("permissions_gate")
    return (
        isinstance(gate, Gate)
        and gate.mode.can_prompt
        and isinstance(gate.prompter, TerminalPrompter)
    )


def progress_for(
    options: Mapping[str, Any],
    start: Checkpoint | None,
    stream: IO[str],
    *,
    utc: bool = False,
    plain: bool = False,
) -> PlainProgress:
    """A live status line when ``stream`` is a terminal, else plain lines; plain lines too when
    asked (``-v``: log lines share the stream) or when a permission prompt may need it."""
    if stream.isatty() and not plain and not may_prompt(options):
        return LiveStatus(options, start, Console(file=stream), utc=utc)
    return PlainProgress(options, start, stream, utc=utc)

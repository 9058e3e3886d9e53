"""The live status line of a CLI run on a terminal, rendered by rich into a string."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

from rich.console import Console

from autonomous import (
    HistorySummarized,
    ModelCalled,
    ModelCalling,
    Sleeping,
    ToolCalled,
    ToolCalling,
    TurnFinished,
    TurnStarted,
)
from autonomous._cli._status import LiveStatus, PlainProgress, progress_for
from autonomous.testing import FakeClock
from eventlog import Checkpoint
from permissions import Gate, Mode, TerminalPrompter

START = datetime(2026, 12, 1, 16, 0, tzinfo=UTC)
BUDGETS = {"max_turns": 10, "max_cost_usd": 1.0, "max_wallclock": 3600}


def terminal() -> tuple[Console, StringIO]:
    """A rich console that believes it writes to a terminal, and what it wrote."""
    out = StringIO()
    return Console(file=out, force_terminal=True, width=200, color_system=None), out


def status(clock: FakeClock, start: Checkpoint | None = None) -> tuple[LiveStatus, StringIO]:
    """A status line on a fake terminal, redrawn only on events (no refresh thread)."""
    console, out = terminal()
    live = LiveStatus(BUDGETS, start, console, clock=clock, utc=True, auto_refresh=False)
    return live, out


class TestLiveStatus:
    def test_a_model_call_shows_how_long_it_has_taken(self) -> None:
        """While the model is called: the model, the call's time, the turn, the run's time,
        what is spent and what is left."""
        clock = FakeClock(START)
        live, _ = status(clock)
        clock.advance(5)
        live(1, TurnStarted(1))
        live(1, ModelCalling(1, "openai/gpt-4o-mini"))
        clock.advance(3)
        assert (
            "calling openai/gpt-4o-mini 3s | turn 1 | 8s elapsed | $0.000000"
            " | left: 9 turns, $1.0000, 59m 52s | tokens 0 in / 0 out"
        ) == live.status()

    def test_a_tool_call_shows_its_tool_and_what_was_spent(self) -> None:
        """While a tool runs: its name and time, the tokens and cost so far."""
        clock = FakeClock(START)
        live, _ = status(clock)
        live(2, TurnStarted(2))
        live(2, ModelCalled(2, "m", 120, 30, 0.25, 1))
        live(2, ToolCalling(2, "check_disk"))
        clock.advance(65)
        assert (
            "running check_disk 1m 05s | turn 2 | 1m 05s elapsed | $0.250000"
            " | left: 8 turns, $0.7500, 58m 55s | tokens 120 in / 30 out"
        ) == live.status()
        live(2, ToolCalled(2, "check_disk", "ok"))
        assert live.status().startswith("working 0s | turn 2")

    def test_a_history_summary_is_spent_like_a_model_call(self) -> None:
        """The summary model's call counts in what is spent; once it answered, the run is
        working again (not still calling it)."""
        clock = FakeClock(START)
        live, _ = status(clock)
        live(9, TurnStarted(9))
        live(9, ModelCalling(9, "cheap-model"))
        live(9, HistorySummarized(9, "cheap-model", 1, 7, 900, 30, 0.125))
        assert (
            "working 0s | turn 9 | 0s elapsed | $0.125000"
            " | left: 1 turn, $0.8750, 1h 00m | tokens 900 in / 30 out"
        ) == live.status()

    def test_a_sleep_shows_its_wake_time(self) -> None:
        """While it sleeps: the wake time, with its date and zone."""
        clock = FakeClock(START)
        live, _ = status(clock)
        live(1, Sleeping(1, START + timedelta(minutes=5)))
        clock.advance(60)
        assert live.status().startswith("sleeping until 2026-12-01 16:05:00 +00:00 1m 00s")

    def test_a_resumed_run_counts_from_its_checkpoint(self) -> None:
        """A resumed run's line starts from the checkpoint's turns and spending."""
        start = Checkpoint(4, 400, 40, 0.5, next_prompt="go on")
        live, _ = status(FakeClock(START), start)
        assert (
            "starting 0s | turn 4 | 0s elapsed | $0.500000 | left: 6 turns, $0.5000, 1h 00m"
            " | tokens 400 in / 40 out"
        ) == live.status()

    def test_the_line_is_drawn_on_the_terminal_and_a_turn_leaves_a_line_above_it(self) -> None:
        """On the terminal: the status line drawn in place, a finished turn's line kept above
        it, and the status line erased at the end."""
        clock = FakeClock(START)
        live, out = status(clock)
        with live:
            live(1, TurnStarted(1))
            live(1, ModelCalling(1, "m"))
            drawn = out.getvalue()
            live(1, ModelCalled(1, "m", 20, 10, 0.0, 0))
            live(1, TurnFinished(1, 1))
        assert "calling m 0s | turn 1" in drawn
        lasting = "turn 1 | tokens 20 in / 10 out | $0.000000 | left: 9 turns, $1.0000, 1h 00m\n"
        assert lasting in out.getvalue()
        assert "\x1b[2K" in out.getvalue()  # the status line is erased in place


class TestProgressFor:
    def test_a_file_gets_plain_lines(self) -> None:
        """A stream that is not a terminal gets plain lines, a terminal the live line."""
        assert type(progress_for(BUDGETS, None, StringIO())) is PlainProgress

    def test_a_terminal_gets_the_live_line(self) -> None:
        """A terminal stream gets the live status line."""
        assert type(progress_for(BUDGETS, None, Terminal())) is LiveStatus

    def test_a_run_that_may_prompt_on_the_terminal_gets_plain_lines(self) -> None:
        """A gate that may ask on the terminal keeps it free of a redrawn line; one that
        never asks does not."""
        asking = {**BUDGETS, "permissions_gate": Gate(Mode.ASK, TerminalPrompter())}
        never = {**BUDGETS, "permissions_gate": Gate(Mode.ALLOW)}
        assert type(progress_for(asking, None, Terminal())) is PlainProgress
        assert type(progress_for(never, None, Terminal())) is LiveStatus

    def test_plain_on_request(self) -> None:
        """Asked for plain lines (as -v does, whose logs share the stream), a terminal gets
        them."""
        assert type(progress_for(BUDGETS, None, Terminal(), plain=True)) is PlainProgress


class Terminal(StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True

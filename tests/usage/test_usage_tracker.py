"""Tracker: rows per model call, running totals overall and by model."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from usage import Tracker, Usage, UsageRow, UsageTotals

from .usage_strategies import costs, model_names, usages

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

calls = st.lists(st.tuples(model_names, usages(), costs), max_size=40)


class TestUsageTotals:
    """UsageTotals values and their addition."""

    def test_defaults_are_zero(self) -> None:
        """Fresh totals count no calls, tokens or dollars."""
        assert UsageTotals(0, Usage(), 0.0) == UsageTotals()

    def test_add(self) -> None:
        """Adding totals adds calls, usage and cost."""
        assert UsageTotals(3, Usage(3, 3, 1), 1.5) == UsageTotals(
            1, Usage(1, 1), 0.5
        ) + UsageTotals(2, Usage(2, 2, 1), 1.0)


class TestTracker:
    """Tracker.record, rows, totals and by_model."""

    def test_empty(self) -> None:
        """A new tracker has no rows and zero totals."""
        tracker = Tracker()
        assert ((), UsageTotals(), {}, 0) == (
            tracker.rows,
            tracker.totals,
            tracker.by_model(),
            len(tracker),
        )

    def test_record_keeps_one_row_per_call(self) -> None:
        """Each record call appends one frozen row with its time."""
        tracker = Tracker()
        tracker.record("m", Usage(1, 2), 0.25, at=T0)
        assert (UsageRow("m", Usage(1, 2), 0.25, T0),) == tracker.rows

    def test_rows_are_frozen(self) -> None:
        """A recorded row cannot be changed."""
        tracker = Tracker()
        tracker.record("m", Usage(1, 2), 0.25, at=T0)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            tracker.rows[0].cost_usd = 0.0  # type: ignore[misc]

    def test_clock_stamps_rows_without_at(self) -> None:
        """A row recorded without ``at`` gets the injected clock's time."""
        tracker = Tracker(clock=lambda: T0)
        tracker.record("m", Usage(), 0.0)
        assert T0 == tracker.rows[0].at

    def test_default_clock_is_utc_now(self) -> None:
        """The default clock gives an aware UTC time close to now."""
        tracker = Tracker()
        tracker.record("m", Usage(), 0.0)
        at = tracker.rows[0].at
        assert UTC == at.tzinfo
        assert abs(datetime.now(UTC) - at) < timedelta(minutes=1)

    def test_at_is_stored_in_utc(self) -> None:
        """An aware time in another zone is stored as the same instant in UTC."""
        tracker = Tracker()
        tracker.record("m", Usage(), 0.0, at=T0.astimezone(timezone(timedelta(hours=2))))
        assert (T0, UTC) == (tracker.rows[0].at, tracker.rows[0].at.tzinfo)

    def test_naive_at_is_rejected(self) -> None:
        """A naive ``at`` is a ValueError, not a guess about its zone."""
        with pytest.raises(ValueError, match="timezone-aware"):
            Tracker().record("m", Usage(), 0.0, at=datetime(2025, 1, 1))

    @pytest.mark.parametrize("bad", [-0.01, math.nan, math.inf])
    def test_bad_cost_is_rejected(self, bad: float) -> None:
        """A negative or non-finite cost is a ValueError and records nothing."""
        tracker = Tracker()
        with pytest.raises(ValueError, match="cost_usd"):
            tracker.record("m", Usage(), bad)
        assert 0 == len(tracker)

    def test_totals_and_by_model(self) -> None:
        """Totals add every call; by_model splits them by model name in first-seen order."""
        tracker = Tracker()
        tracker.record("b", Usage(10, 1), 0.5, at=T0)
        tracker.record("a", Usage(20, 2, 5), 0.25, at=T0)
        tracker.record("b", Usage(30, 3), 0.125, at=T0)
        assert UsageTotals(3, Usage(60, 6, 5), 0.875) == tracker.totals
        assert {
            "b": UsageTotals(2, Usage(40, 4), 0.625),
            "a": UsageTotals(1, Usage(20, 2, 5), 0.25),
        } == tracker.by_model()
        assert ["b", "a"] == list(tracker.by_model())

    def test_by_model_is_a_copy(self) -> None:
        """Changing the returned dict does not change the tracker."""
        tracker = Tracker()
        tracker.record("m", Usage(1, 1), 0.1, at=T0)
        tracker.by_model().clear()
        assert ["m"] == list(tracker.by_model())

    @given(calls)
    def test_totals_equal_the_sum_of_rows(self, recorded: list[tuple[str, Usage, float]]) -> None:
        """The running totals equal the rows added up afresh."""
        tracker = Tracker(clock=lambda: T0)
        for model, usage, cost in recorded:
            tracker.record(model, usage, cost)
        rows = tracker.rows
        summed = sum((row.usage for row in rows), Usage())
        assert (len(recorded), summed) == (tracker.totals.calls, tracker.totals.usage)
        assert math.isclose(
            math.fsum(row.cost_usd for row in rows), tracker.totals.cost_usd, abs_tol=1e-9
        )

    @given(calls)
    def test_by_model_adds_up_to_totals(self, recorded: list[tuple[str, Usage, float]]) -> None:
        """The per-model totals add up to the overall totals."""
        tracker = Tracker(clock=lambda: T0)
        for model, usage, cost in recorded:
            tracker.record(model, usage, cost)
        summed = sum(tracker.by_model().values(), UsageTotals())
        assert (tracker.totals.calls, tracker.totals.usage) == (summed.calls, summed.usage)
        assert math.isclose(tracker.totals.cost_usd, summed.cost_usd, abs_tol=1e-9)
        assert {model for model, _, _ in recorded} == set(tracker.by_model())

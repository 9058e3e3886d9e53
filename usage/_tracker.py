"""Tracker: one row per model call, with running totals overall and by model."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import attrs

from ._usage import Usage


def _utcnow() -> datetime:
    return datetime.now(UTC)


@attrs.frozen
class UsageRow:
    """One model call: the model's name, its token usage, its cost in USD and when it finished."""

    model: str
    usage: Usage
    cost_usd: float
    at: datetime


@attrs.frozen
class UsageTotals:
    """Calls, tokens and dollars added up; ``a + b`` adds two totals."""

    calls: int = 0
    usage: Usage = attrs.field(factory=Usage)
    cost_usd: float = 0.0

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            self.calls + other.calls, self.usage + other.usage, self.cost_usd + other.cost_usd
        )


class Tracker:
    """Records one row per model call and keeps running totals, overall and by model.

    ``record`` and ``totals`` are O(1): the sums are kept as calls arrive, never recomputed
    from the rows. ``clock`` (default: the current UTC time) stamps rows recorded without
    ``at``. Use a tracker from one event loop thread; the totals are replaced as whole frozen
    values, so a reader elsewhere never sees a half-updated sum.
    """

    def __init__(self, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self._clock = clock
        self._rows: list[UsageRow] = []
        self._totals = UsageTotals()
        self._by_model: dict[str, UsageTotals] = {}

    def record(
        self, model: str, usage: Usage, cost_usd: float, *, at: datetime | None = None
    ) -> None:
        """Add one model call; ``at`` must be timezone-aware (it is stored in UTC).

        Raises ``ValueError`` for a negative or non-finite cost or a naive ``at``.
        """
        if not math.isfinite(cost_usd) or cost_usd < 0:
            raise ValueError(f"cost_usd must be a finite number >= 0, got {cost_usd!r}")
        if at is None:
            at = self._clock()
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(f"at must be timezone-aware (UTC), got naive {at!r}")
        row = UsageRow(model, usage, float(cost_usd), at.astimezone(UTC))
        self._rows.append(row)
        one = UsageTotals(1, usage, row.cost_usd)
        self._totals = self._totals + one
        self._by_model[model] = self._by_model.get(model, UsageTotals()) + one

    @property
    def rows(self) -> tuple[UsageRow, ...]:
        """Every recorded call, oldest first (a snapshot: a copy of the row list)."""
        return tuple(self._rows)

    @property
    def totals(self) -> UsageTotals:
        """Calls, tokens and cost of every recorded call together."""
        return self._totals

    def by_model(self) -> dict[str, UsageTotals]:
        """Totals per model name, in the order each model was first recorded (a fresh dict)."""
        return dict(self._by_model)

    def __len__(self) -> int:
        """The number of recorded calls."""
        return len(self._rows)

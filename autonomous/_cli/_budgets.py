"""The budgets a resume runs under: the session's own, as its log recorded them.

A session's budgets (turns, input and output tokens, dollars, wall-clock per run) are recorded
in its log when a run starts it and at each change, and the library goes on under the ones
recorded last. So a resume from a spec passes only what the command line changes (``resume
--max-turns 5``: the library records the change), never the spec's budgets, which would undo
an earlier override (``run --max-turns 2``). The one exception is a session from before
budgets were recorded: it gets the spec's, as it always did, so that it keeps its cost cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventlog import Budgets, Checkpoint, EventKind, EventLog, SessionKey

#: The run options that are a session's budgets (their names as the entry points take them).
BUDGET_OPTIONS = (
    "max_turns",
    "max_input_tokens",
    "max_output_tokens",
    "max_cost_usd",
    "max_wallclock",
)


async def recorded_budgets(log: EventLog, key: SessionKey) -> Budgets | None:
    """The budgets the session recorded last: its newest ``budgets`` event or its latest
    checkpoint's, whichever is newer; None for a session older than recorded budgets."""
    found: list[tuple[int, Budgets]] = []
    latest = await log.latest_checkpoint(key)
    if latest is not None and isinstance(latest.payload, Checkpoint) and latest.payload.budgets:
        found.append((latest.seq, latest.payload.budgets))
    for event in await log.read_last(key, [EventKind.BUDGETS], 1):
        if isinstance(event.payload, Budgets):
            found.append((event.seq, event.payload))
    return max(found, key=lambda seq_budgets: seq_budgets[0])[1] if found else None


def resume_options(
    spec_options: Mapping[str, Any], overrides: Mapping[str, Any], recorded: Budgets | None
) -> dict[str, Any]:
    """The options a resume passes: the spec's without its budgets, the command line's
    ``overrides`` (budgets by their option names) over them; the spec's budgets stay only
    when the session recorded none (``recorded`` None)."""
    options = {
        name: value
        for name, value in spec_options.items()
        if recorded is None or name not in BUDGET_OPTIONS
    }
    options.update(overrides)
    return options


def budget_options(budgets: Budgets) -> dict[str, Any]:
    """``budgets`` as run options (0: no cap)."""
    return {
        "max_turns": budgets.max_turns,
        "max_input_tokens": budgets.max_input_tokens,
        "max_output_tokens": budgets.max_output_tokens,
        "max_cost_usd": budgets.max_cost_usd,
        "max_wallclock": budgets.max_wallclock,
    }


def budgets_in_force(recorded: Budgets | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The budgets a resume with ``options`` runs under, as run options: the recorded ones,
    with those ``options`` pass over them (what the progress lines count down from and the
    price check looks at)."""
    base = budget_options(recorded) if recorded is not None else {}
    return {**base, **{name: options[name] for name in BUDGET_OPTIONS if name in options}}

"""Two and four daemon processes share deferred sessions: each wake is resumed exactly once."""

from __future__ import annotations

import os
import random
from datetime import timedelta
from pathlib import Path

import pytest

from eventlog import utcnow

from .daemons import Fleet, reports_of
from .harness import (
    histories,
    seed,
    session_keys,
    template_events,
    wait_completed,
    wake_problems,
    wakes_of,
    write_agent,
)

#: Sessions per test, and how many times each wakes (its first wake staggered over SPREAD s,
#: each later one a second after the previous turn).
SESSIONS = int(os.environ.get("FLEET_TEST_SESSIONS", "500"))
WAKES = 2
SPREAD = 3.0


@pytest.mark.timeout(180)  # 500 sessions x 3 turns of daemons starting on 2 shared cores
@pytest.mark.parametrize("daemons", [2, 4])
def test_every_wake_resumed_exactly_once(
    db: str, agent_dir: Path, tmp_path: Path, fleet: Fleet, daemons: int
) -> None:
    """Deferred sessions due at staggered times, resumed by several daemons at once: every
    session's wakes each ran once, in order, none before its time, none twice, none missed."""
    spec = write_agent(agent_dir, "waking")
    template = template_events(agent_dir, spec, tmp_path)
    keys = session_keys(SESSIONS)
    random.Random(13).shuffle(keys)  # wake order is not key order
    first = utcnow() + timedelta(seconds=2)
    seed(
        db,
        template,
        {k: first + timedelta(seconds=SPREAD * i / len(keys)) for i, k in enumerate(keys)},
    )
    env = {"FLEET_WAKES": str(WAKES), "FLEET_WAKE_GAP": "1"}
    for n in range(daemons):
        fleet.start(f"daemon{n}", poll=0.5, env=env)
    wait_completed(db, keys, timeout=150)
    found = [wakes_of(key, events) for key, events in histories(db, keys).items()]
    assert [] == wake_problems(found, WAKES)
    failed = reports_of(fleet.daemons, "failed")
    assert [] == [f"{r['daemon']} {r['session']}: {r['error']}" for r in failed]

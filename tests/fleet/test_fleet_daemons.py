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

#: (daemons, sessions, wakes per session): the first wakes staggered over SPREAD seconds (in
#: an order that is not the keys'), each later one a second after the turn before it. Sized
#: for the package's two minutes on two busy cores; FLEET_TEST_SCALE scales the sessions.
SIZES = [(2, 500, 1), (4, 500, 1), (4, 100, 3)]
SCALE = float(os.environ.get("FLEET_TEST_SCALE", "1"))
SPREAD = 3.0


@pytest.mark.timeout(180)  # 500 sessions over daemon processes starting on 2 shared cores
@pytest.mark.parametrize(
    ("daemons", "sessions", "wakes"), SIZES, ids=[f"{d}x{s}x{w}" for d, s, w in SIZES]
)
def test_every_wake_resumed_exactly_once(
    db: str, agent_dir: Path, tmp_path: Path, fleet: Fleet, daemons: int, sessions: int, wakes: int
) -> None:
    """Deferred sessions due at staggered times, resumed by several daemons at once: every
    session's wakes each ran once, in order, none before its time, none twice, none missed."""
    spec = write_agent(agent_dir, "waking")
    template = template_events(agent_dir, spec, tmp_path)
    keys = session_keys(max(int(sessions * SCALE), 1))
    random.Random(13).shuffle(keys)  # wake order is not key order
    first = utcnow() + timedelta(seconds=2)
    spread = {k: first + timedelta(seconds=SPREAD * i / len(keys)) for i, k in enumerate(keys)}
    seed(db, template, spread)
    env = {"FLEET_WAKES": str(wakes), "FLEET_WAKE_GAP": "1"}
    for n in range(daemons):
        fleet.start(f"daemon{n}", poll=0.5, env=env)
    wait_completed(db, keys, timeout=150)
    found = [wakes_of(key, events) for key, events in histories(db, keys).items()]
    assert [] == wake_problems(found, wakes)
    failed = reports_of(fleet.daemons, "failed")
    assert [] == [f"{r['daemon']} {r['session']}: {r['error']}" for r in failed]

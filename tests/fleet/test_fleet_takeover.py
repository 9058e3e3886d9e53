"""A daemon that dies or freezes mid-run: the others take its sessions over and finish them,
and the frozen one, thawed, writes nothing more."""

from __future__ import annotations

import signal
from pathlib import Path

from .daemons import Fleet, reports_of
from .harness import (
    gated_sessions,
    histories,
    start,
    wait_completed,
    wait_in_gate,
    wake_problems,
    wake_writers,
    wakes_of,
    writer_of,
)


def test_a_killed_daemons_sessions_are_finished_by_the_others(
    db: str, agent_dir: Path, tmp_path: Path, fleet: Fleet
) -> None:
    """SIGKILL a daemon while it is mid-run on sessions (waiting in a tool) and the other
    daemons are busy too: after its leases expire the others take those sessions over and
    finish them; every session completes exactly once."""
    keys = gated_sessions(agent_dir, tmp_path, db, 12)
    doomed = start(fleet, "doomed", 4)
    held = wait_in_gate(db, doomed, keys, 4)
    others = [start(fleet, f"other{n}", 4) for n in range(2)]
    for other in others:
        wait_in_gate(db, other, keys, 1)
    doomed.kill()
    (agent_dir / "gate").touch()
    wait_completed(db, keys, timeout=60)
    logs = histories(db, keys)
    assert [] == wake_problems([wakes_of(k, e) for k, e in logs.items()], 1)
    for key in held:  # the doomed daemon's turn began, and another one finished it
        writers = wake_writers(logs[key])
        assert doomed.identity == writers[0], (key, writers)
        assert writers[-1] in {o.identity for o in others}, (key, writers)
    failed = reports_of(fleet.daemons, "failed")
    assert [] == [f"{r['daemon']} {r['session']}: {r['error']}" for r in failed]


def test_a_frozen_holder_writes_nothing_after_the_takeover(
    db: str, agent_dir: Path, tmp_path: Path, fleet: Fleet
) -> None:
    """SIGSTOP a daemon mid-run, past its lease: another daemon takes its sessions over (a new
    epoch) and finishes them. Thawed (SIGCONT), the frozen one's run ends ``lease_lost`` and
    nothing it wrote lands after the takeover: its fenced appends are refused."""
    keys = gated_sessions(agent_dir, tmp_path, db, 3)
    frozen = start(fleet, "frozen", 4)
    wait_in_gate(db, frozen, keys, 3)
    frozen.signal(signal.SIGSTOP)
    # Everything it wrote so far: a frozen process writes nothing more (until thawed).
    frozen_at = {key: events[-1].seq for key, events in histories(db, keys).items()}
    (agent_dir / "gate").touch()  # the frozen one's tool would return now, if it ran
    taker = start(fleet, "taker", 4)
    wait_completed(db, keys, timeout=60)
    frozen.signal(signal.SIGCONT)
    frozen.wait_for(
        "a finished report for each session",
        lambda rs: {r["session"] for r in rs if r["event"] == "finished"} >= set(map(str, keys)),
        timeout=30,
    )
    reasons = {r["session"]: r["reason"] for r in reports_of([frozen], "finished")}
    assert dict.fromkeys(map(str, keys), "lease_lost") == reasons
    logs = histories(db, keys)
    assert [] == wake_problems([wakes_of(k, e) for k, e in logs.items()], 1)
    for key, events in logs.items():
        after = [e for e in events if e.seq > frozen_at[key]]  # the taker's, from its claim on
        late = [e.seq for e in after if writer_of(e) == frozen.identity]
        assert [] == late, f"{key}: the frozen holder wrote after seq {frozen_at[key]}"
        assert {taker.identity} == {writer_of(e) for e in after} - {None}, key

"""Two daemons on hosts of their own (network, UTS and pid namespaces made by the test) share
the sessions of one PostgreSQL log reached over a veth address, and one recovers the other's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .daemons import Fleet, reports_of
from .harness import (
    gated_sessions,
    histories,
    holders,
    start,
    wait_completed,
    wait_in_gate,
    wake_problems,
    wake_writers,
    wakes_of,
)
from .netns import Forwarder, Host, hosts, server_address, via, why_no_namespaces

pytestmark = pytest.mark.postgres


@pytest.fixture
def two_hosts() -> Iterator[list[Host]]:
    """Hosts ``fleet-a`` and ``fleet-b``; where namespaces cannot be made the test is skipped
    with the reason, except on CI (this suite's CI runs as root: there it is a failure)."""
    reason = why_no_namespaces()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the namespace test: {reason}")
        pytest.skip(reason)
    with hosts(["fleet-a", "fleet-b"]) as made:
        yield made


def test_daemons_on_hosts_of_their_own_share_and_recover_sessions(
    pg_dsn: str, two_hosts: list[Host], agent_dir: Path, tmp_path: Path
) -> None:
    """Each daemon, alone in its namespaces (host name, pid 1, network), claims sessions of the
    shared log while the other holds some; killed, one host's sessions are finished by the
    other after its leases expire (no pid or host check can help: they share neither)."""
    keys = gated_sessions(agent_dir, tmp_path, pg_dsn, 8)
    forwarder = Forwarder(server_address(pg_dsn))
    fleet = Fleet(agent_dir, pg_dsn)
    try:
        a, b = (
            start(
                fleet,
                host.hostname,
                2,
                prefix=host.prefix(),
                db=via(pg_dsn, host.gateway, forwarder.listen(host.gateway)),
                identity=f"{host.hostname}:1",
            )
            for host in two_hosts
        )
        held_by_a = wait_in_gate(pg_dsn, a, keys, 2)
        wait_in_gate(pg_dsn, b, keys, 2)
        hosts_holding = {holder.partition(":")[0] for holder in holders(pg_dsn).values()}
        assert {"fleet-a", "fleet-b"} == hosts_holding
        a.kill()
        (agent_dir / "gate").touch()
        wait_completed(pg_dsn, keys, timeout=60)
    finally:
        fleet.close()
        forwarder.close()
    logs = histories(pg_dsn, keys)
    assert [] == wake_problems([wakes_of(k, e) for k, e in logs.items()], 1)
    for key in held_by_a:  # begun on fleet-a, finished on fleet-b
        writers = wake_writers(logs[key])
        assert ("fleet-a:1", "fleet-b:1") == (writers[0], writers[-1]), (key, writers)
    failed = reports_of(fleet.daemons, "failed")
    assert [] == [f"{r['daemon']} {r['session']}: {r['error']}" for r in failed]

"""Hosts of their own for the fleet tests: network namespaces, veth pairs and a TCP forwarder.

Each host is a network namespace joined to the root one by a veth pair (a /30 of 10.231.x.0);
a daemon started with :meth:`Host.prefix` runs in it with a UTS and a pid namespace of its
own too (its own host name, pid 1), so nothing it does can lean on a host or a pid it shares
with another daemon. The server listens on 127.0.0.1 only: a :class:`Forwarder` in the root
namespace listens on each veth's root-side address and relays to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

import attrs


@attrs.frozen
class Host:
    """One namespace: its name, the host name its processes see, and its veth's addresses
    (``address`` inside it, ``gateway`` on the root side)."""

    netns: str
    hostname: str
    address: str
    gateway: str

    def prefix(self) -> list[str]:
        """The command prefix that runs a program on this host (as pid 1 of its own pid
        namespace, under this host name); SIGKILL of the prefix's process group ends it."""
        return [
            *("ip", "netns", "exec", self.netns),
            *("unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child"),
            *("sh", "-c", 'hostname "$0" && exec "$@"', self.hostname),
        ]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def why_no_namespaces() -> str | None:
    """Why this machine cannot make the test's namespaces (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"no {tool} command on PATH"
    probe = f"fleetprobe{secrets.token_hex(3)}"
    made = subprocess.run(
        ["ip", "netns", "add", probe], capture_output=True, text=True, check=False
    )
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


@contextlib.contextmanager
def hosts(names: Sequence[str]) -> Iterator[list[Host]]:
    """One namespace per host name, each with its veth pair up; all deleted afterwards."""
    tag = secrets.token_hex(2)
    subnet = secrets.randbelow(200) + 20  # the x of 10.231.x.0: one /30 per host in it
    made: list[Host] = []
    try:
        for i, hostname in enumerate(names):
            host = Host(
                netns=f"fleet{tag}{i}",
                hostname=hostname,
                address=f"10.231.{subnet}.{4 * i + 2}",
                gateway=f"10.231.{subnet}.{4 * i + 1}",
            )
            _ip("netns", "add", host.netns)
            made.append(host)
            outer, inner = f"vf{tag}{i}o", f"vf{tag}{i}i"
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", host.netns)
            _ip("addr", "add", f"{host.gateway}/30", "dev", outer)
            _ip("link", "set", outer, "up")
            inside = ("-n", host.netns)
            _ip(*inside, "addr", "add", f"{host.address}/30", "dev", inner)
            _ip(*inside, "link", "set", inner, "up")
            _ip(*inside, "link", "set", "lo", "up")
        yield made
    finally:
        for i, host in enumerate(made):
            # Deleting one end of a veth deletes both; the namespace goes with its processes'.
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", f"vf{tag}{i}o")
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", host.netns)


class Forwarder:
    """TCP relays from addresses of the root namespace to one target, on a thread of its own."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._ends: set[asyncio.StreamWriter] = set()  # both ends of every live relay
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def listen(self, host: str) -> int:
        """Relay connections to ``host`` (a free port) to the target; the port."""
        made = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, host, 0), self._loop
        )
        server = made.result(timeout=10)
        self._servers.append(server)
        port: int = server.sockets[0].getsockname()[1]
        return port

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        ends = {writer, up_writer}
        self._ends |= ends
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._ends -= ends

    def close(self) -> None:
        """Stop listening, drop every relay, end the thread."""

        async def shut() -> None:
            for server in self._servers:
                server.close()
            for end in list(self._ends):  # each relay then sees its ends close, and returns
                end.close()
            relays = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if relays:
                await asyncio.wait(relays, timeout=5)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy ``source`` to ``sink`` until either end closes (a killed daemon resets its end)."""
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except OSError:
        pass
    finally:
        sink.close()


def via(dsn: str, host: str, port: int) -> str:
    """``dsn`` with its server address replaced by ``host:port`` (the rest, the schema's
    search_path included, kept)."""
    parts = urlsplit(dsn)
    netloc = f"{parts.username}@{host}:{port}" if parts.username else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def server_address(dsn: str) -> tuple[str, int]:
    """The host and port a DSN's server is at."""
    parts = urlsplit(dsn)
    return parts.hostname or "127.0.0.1", parts.port or 5432

"""MCPServer: how to reach one MCP server, a command over stdio or a streamable HTTP URL."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import PurePath
from types import MappingProxyType
from typing import Literal
from urllib.parse import urlsplit

import attrs

from .._errors import ConfigurationError

#: What a server name may hold: it prefixes tool names, which OpenAI limits to these.
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,40}")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")
_PYTHON = re.compile(r"python[0-9.]*(\.exe)?")


#: Seconds a server has to start and list its tools unless ``connect_timeout`` says otherwise.
DEFAULT_CONNECT_TIMEOUT = 30.0


def _frozen_map(value: Mapping[str, str] | None) -> Mapping[str, str] | None:
    return None if value is None else MappingProxyType(dict(value))


def _connect_seconds(value: object) -> float:
    """``connect_timeout`` as seconds: a number or a timedelta, more than 0 and finite."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"MCPServer connect_timeout must be seconds > 0 (a number or a timedelta), "
            f"got {value!r}"
        )
    return float(value)


@attrs.frozen
class MCPServer:
    """One MCP server of an agent: made with :meth:`stdio` or :meth:`http`, passed as
    ``Agent(..., mcp_servers=[...])``.

    ``name`` names the server in errors and logs, and prefixes its tools' names where they
    clash (``{name}__{tool}``): 1 to 40 letters, digits, ``_`` or ``-``. By default it comes
    from the command (``python -m disk_server`` gives ``disk_server``) or the URL's host.

    ``connect_timeout`` (seconds, or a timedelta; default 30) is how long the server has to
    start and list its tools, when the run starts and each time it is started again. It is
    measured on the run's clock, and cut to what is left of the run's ``max_wallclock``
    (from the run's start) when that is less: a server that did not answer in time fails
    the start with :class:`MCPServerError`, which says which of the two it ran out of.
    """

    kind: Literal["stdio", "http"]
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = attrs.field(default=None, converter=_frozen_map)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] | None = attrs.field(default=None, converter=_frozen_map)
    connect_timeout: float = attrs.field(
        default=DEFAULT_CONNECT_TIMEOUT, converter=_connect_seconds
    )

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        *,
        connect_timeout: float | timedelta = DEFAULT_CONNECT_TIMEOUT,
    ) -> MCPServer:
        """A server the run starts as ``command *args`` and talks to over its stdin/stdout.

        ``env`` is added to a small safe environment (``PATH``, ``HOME`` ...), as the SDK
        does; ``cwd`` is the directory it starts in (default: the run's);
        ``connect_timeout`` bounds its start (see the class).
        """
        if not isinstance(command, str) or not command.strip():
            raise ConfigurationError(f"MCPServer.stdio needs a command, got {command!r}")
        if isinstance(args, str):
            raise ConfigurationError(f"MCPServer.stdio args must be a list, got {args!r}")
        listed = tuple(args)
        _check_strings("args", listed)
        if env is not None:
            _check_strings("env", (*env.keys(), *env.values()))
        folder = None if cwd is None else os.fspath(cwd)
        named = _named(name, _command_name(command, listed))
        return cls(
            "stdio",
            named,
            command,
            listed,
            env,
            folder,
            connect_timeout=connect_timeout,
        )

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        *,
        connect_timeout: float | timedelta = DEFAULT_CONNECT_TIMEOUT,
    ) -> MCPServer:
        """A server at ``url`` that speaks streamable HTTP; ``headers`` go with every request
        (an ``Authorization`` header, say); ``connect_timeout`` bounds its start (see the
        class)."""
        host = _http_host(url)
        if headers is not None:
            _check_strings("headers", (*headers.keys(), *headers.values()))
        return cls(
            "http",
            _named(name, host),
            url=url,
            headers=headers,
            connect_timeout=connect_timeout,
        )

    def __repr__(self) -> str:  # headers and env may hold secrets: never shown
        where = f"url={self.url!r}" if self.kind == "http" else f"command={self.command!r}"
        return f"MCPServer.{self.kind}({where}, name={self.name!r})"


def _check_strings(option: str, values: Sequence[object]) -> None:
    for value in values:
        if not isinstance(value, str):
            raise ConfigurationError(f"MCPServer {option} must be strings, got {value!r}")


def _http_host(url: object) -> str:
    """The host of an http or https URL; a ConfigurationError for anything else."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"MCPServer.http needs an http:// or https:// URL, got {url!r}")
    return parts.hostname


def _command_name(command: str, args: tuple[str, ...]) -> str:
    """A name from the command: its file name, or for Python the module or script it runs."""
    stem = PurePath(command).stem
    if _PYTHON.fullmatch(PurePath(command).name) and args:
        if "-m" in args[:-1]:
            return args[args.index("-m") + 1].rpartition(".")[2]
        scripts = [a for a in args if not a.startswith("-")]
        if scripts:
            return PurePath(scripts[0]).stem
    return stem


def _named(given: object, derived: str) -> str:
    """The given name, checked; else the derived one, made safe."""
    if given is None:
        return _UNSAFE.sub("_", derived).strip("_")[:40] or "mcp"
    if not isinstance(given, str) or _NAME.fullmatch(given) is None:
        raise ConfigurationError(
            f"MCPServer name {given!r} is invalid: use 1 to 40 letters, digits, '_' or '-'"
        )
    return given

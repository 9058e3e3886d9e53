"""Where a TOML file sets each key: line numbers for spec problems (tomllib gives none).

A small line scanner, not a TOML parser: the file has been parsed by tomllib already, so it
only has to find table headers and ``key =`` at the start of a line, skipping multi-line strings
and the continuation lines of multi-line arrays.
"""

from __future__ import annotations

import re

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_PART = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = re.compile(rf"^\s*\[\[?\s*(?P<name>{_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(rf"^\s*(?P<key>{_DOTTED})\s*=")
_SPLIT = re.compile(rf"\s*({_PART})\s*(?:\.|$)")


def key_lines(text: str) -> dict[str, int]:
    """The line (from 1) of each table header and key the TOML ``text`` sets, as dotted keys
    (``budgets``, ``budgets.max_turns``; ``mcp[1]`` and ``mcp[1].url`` for the second
    ``[[mcp]]`` table); the first line wins when a key repeats."""
    found: dict[str, int] = {}
    arrays: dict[str, int] = {}  # how many [[name]] tables each array has so far
    table = ""
    open_string: str | None = None  # the delimiter of the multi-line string we are in
    depth = 0  # how deep in brackets a multi-line array or table has left us
    for number, line in enumerate(text.splitlines(), start=1):
        rest = line
        if open_string is not None:
            end = line.find(open_string)
            if end < 0:
                continue
            rest, open_string = line[end + 3 :], None
        elif depth == 0:
            header = _HEADER.match(line)
            if header:
                table = _dotted(header["name"])
                found.setdefault(table, number)
                if line.lstrip().startswith("[["):  # one table of an array: name[i]
                    arrays[table] = index = arrays.get(table, -1) + 1
                    table = f"{table}[{index}]"
                    found.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                name = _dotted(key["key"])
                found.setdefault(f"{table}.{name}" if table else name, number)
                rest = line[key.end() :]
        open_string, depth = _scan(rest, depth)
    return found


def _dotted(text: str) -> str:
    """A TOML key (``a . "b c"``) as a dotted name with its quotes taken off (``a.b c``)."""
    return ".".join(part.strip("\"'") for part in _SPLIT.findall(text))


def _scan(text: str, depth: int) -> tuple[str | None, int]:
    """Follow ``text`` (the rest of a line): the multi-line string it leaves open, if any, and
    the bracket depth after it (strings and comments skipped)."""
    i = 0
    while i < len(text):
        char = text[i]
        if text.startswith(('"""', "'''"), i):
            end = text.find(text[i : i + 3], i + 3)
            if end < 0:
                return text[i : i + 3], depth
            i = end + 3
            continue
        if char in "\"'":
            i = _string_end(text, i)
        elif char == "#":
            break
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return None, depth


def _string_end(text: str, start: int) -> int:
    """The index of the quote that closes the one-line string opened at ``start``."""
    quote = text[start]
    i = start + 1
    while i < len(text):
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i
        i += 1
    return len(text)

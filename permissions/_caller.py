"""Caller: who asked for a tool call (identity, labels, admin), as a hashable frozen value."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import attrs


def _label_dict(data: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of ``data`` (None is empty), refusing what is not ``str -> str``."""
    items = dict(data or {})
    for key, value in items.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"labels must map str to str, got {key!r}: {value!r}")
    return items


@attrs.define(eq=False, repr=False)
class FrozenLabels(Mapping[str, str]):
    """An immutable, hashable ``str -> str`` mapping (a frozen copy of what was passed)."""

    _data: dict[str, str] = attrs.field(factory=dict, converter=_label_dict)
    _hash: int | None = attrs.field(default=None, init=False)  # computed on first use

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self._data)


def frozen_labels(value: Mapping[str, str] | None) -> Mapping[str, str]:
    """Return a frozen, hashable copy of ``value`` (None is empty); a frozen copy is kept as is."""
    return value if isinstance(value, FrozenLabels) else FrozenLabels(value)


@attrs.frozen
class Caller:
    """Who asked for a tool call: an identity, labels (``{"team": "ops"}``) and an admin flag.

    ``labels`` is stored as a frozen copy, so a Caller is immutable and hashable.
    """

    identity: str = ""
    labels: Mapping[str, str] = attrs.field(factory=FrozenLabels, converter=frozen_labels)
    admin: bool = False

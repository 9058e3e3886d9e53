"""Rule: a tool-name glob plus optional caller conditions, for the gate's allow and deny lists;
and the names of a tool that rules are tried on."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping

import attrs

from ._caller import Caller, frozen_labels


def _identities(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"identities must be a sequence of strings, not the string {value!r}")
    return tuple(value)


def _non_blank(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"Rule.tool must be a non-empty glob such as 'read_*', got {value!r}")


@attrs.frozen
class Rule:
    """Matches a tool call when ``tool`` (an ``fnmatch`` glob) matches the tool's name and the
    caller meets every condition given: ``admin_only`` (the caller is an admin), ``labels``
    (every pair is on the caller) and ``identities`` (the caller's identity is one of them).

    A rule with a caller condition never matches a call without a caller. Matching is
    case-sensitive on every platform. The gate tries a rule on every name a tool is known by
    (its offered name and its ``aliases``, such as an MCP tool's own name and
    ``{server}__{tool}``): a rule that matches any of them matches the call.
    """

    tool: str = attrs.field(validator=_non_blank)
    admin_only: bool = attrs.field(default=False, kw_only=True)
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=frozen_labels, kw_only=True)
    identities: tuple[str, ...] = attrs.field(default=(), converter=_identities, kw_only=True)

    @property
    def has_caller_condition(self) -> bool:
        """True when the rule restricts who the caller is, not only which tool."""
        return self.admin_only or bool(self.labels) or bool(self.identities)

    def matches(self, tool: str, caller: Caller | None) -> bool:
        """True when the glob matches ``tool`` and ``caller`` meets the rule's conditions."""
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        if not self.has_caller_condition:
            return True
        if caller is None:
            return False
        if self.admin_only and not caller.admin:
            return False
        if self.identities and caller.identity not in self.identities:
            return False
        return all(caller.labels.get(key) == value for key, value in self.labels.items())

    def describe(self) -> str:
        """A short text for decision reasons: the glob and any caller conditions."""
        parts = [repr(self.tool)]
        if self.admin_only:
            parts.append("admin only")
        if self.labels:
            parts.append("labels " + ", ".join(f"{k}={v}" for k, v in self.labels.items()))
        if self.identities:
            parts.append("identities " + ", ".join(self.identities))
        return "; ".join(parts)


def to_aliases(aliases: Iterable[str]) -> tuple[str, ...]:
    """``aliases`` as a tuple of names, each once, in the order given.

    Raises:
        TypeError: ``aliases`` is a string (its letters are no names) or holds a non-string.
        ValueError: an alias is empty.
    """
    if isinstance(aliases, str):
        raise TypeError(f"aliases must be a sequence of names, not the string {aliases!r}")
    names = tuple(aliases)
    for alias in names:
        if not isinstance(alias, str):
            raise TypeError(f"aliases must be strings, got {alias!r}")
        if not alias:
            raise ValueError("an alias must be a non-empty name")
    return tuple(dict.fromkeys(names))


def known_names(tool: str, aliases: Iterable[str]) -> tuple[str, ...]:
    """``tool`` then each of ``aliases`` (checked by :func:`to_aliases`) that is not ``tool``:
    every name the rules are tried on."""
    return (tool, *(alias for alias in to_aliases(aliases) if alias != tool))


def to_rules(rules: Iterable[Rule | str]) -> tuple[Rule, ...]:
    """Turn a sequence of rules and glob strings (shorthand for ``Rule(tool=s)``) into rules."""
    if isinstance(rules, str):
        raise TypeError(f"rules must be a sequence of rules or globs, not the string {rules!r}")
    return tuple(rule if isinstance(rule, Rule) else Rule(rule) for rule in rules)

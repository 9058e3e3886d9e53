"""Decision, and the pure rule-and-mode part of the gate (everything but the prompt)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ._caller import Caller
from ._mode import Mode
from ._rules import Rule

PLAN_DENIAL = "plan mode: tool is not read-only"


@attrs.frozen
class Decision:
    """The gate's answer to one tool call: allowed or not, why, under which mode, and
    whether a prompter was consulted."""

    allowed: bool
    reason: str
    mode: Mode
    prompted: bool = False


def decide(
    mode: Mode,
    allow: Sequence[Rule],
    deny: Sequence[Rule],
    names: Sequence[str],
    *,
    caller: Caller | None,
    read_only: bool,
) -> Decision | None:
    """Decide a tool call from the rules and the mode alone; ``None`` means: ask the prompter.

    ``names`` are every name the tool is known by, the one it is offered under first (see
    :func:`permissions._rules.known_names`). A rule matches when it matches any of them, so a
    tool's decision depends on the tool alone, never on the name it happens to be offered
    under: a deny rule holds, and an allow rule neither lapses nor starts to apply, when
    another tool takes a name. Deny rules win in every mode. Then YOLO allows, PLAN allows
    read-only tools only (no name widens that), ALLOW allows what an allow rule matches and
    denies the rest (as Go's allow mode does), and ASK allows what an allow rule matches and
    leaves the rest to the prompter.
    """
    tool = names[0]
    for rule in deny:
        if (name := _matched(rule, names, caller)) is not None:
            return Decision(False, f"denied by deny rule {_by(rule, name, tool)}", mode)
    if mode is Mode.YOLO:
        return Decision(True, "yolo mode: allowed without asking", mode)
    if mode is Mode.PLAN:
        if read_only:
            return Decision(True, "plan mode: tool is read-only", mode)
        return Decision(False, PLAN_DENIAL, mode)
    for rule in allow:
        if (name := _matched(rule, names, caller)) is not None:
            return Decision(True, f"allowed by allow rule {_by(rule, name, tool)}", mode)
    if mode is Mode.ALLOW:
        also = ", ".join(map(repr, names[1:]))
        known = f" (also known as {also})" if also else ""
        return Decision(False, f"allow mode: tool {tool!r}{known} is not in the allow list", mode)
    return None


def _matched(rule: Rule, names: Sequence[str], caller: Caller | None) -> str | None:
    """The first of ``names`` that ``rule`` matches for ``caller``; None when none does."""
    return next((name for name in names if rule.matches(name, caller)), None)


def _by(rule: Rule, name: str, tool: str) -> str:
    """The rule, and the name it matched when that is not the offered one."""
    return rule.describe() if name == tool else f"{rule.describe()} on its name {name!r}"

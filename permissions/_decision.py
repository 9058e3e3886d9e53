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
    tool: str,
    *,
    caller: Caller | None,
    read_only: bool,
) -> Decision | None:
    """Decide a tool call from the rules and the mode alone; ``None`` means: ask the prompter.

    Deny rules win in every mode. Then YOLO allows, PLAN allows read-only tools only, ALLOW
    allows what an allow rule matches and denies the rest (as Go's allow mode does), and ASK
    allows what an allow rule matches and leaves the rest to the prompter.
    """
    for rule in deny:
        if rule.matches(tool, caller):
            return Decision(False, f"denied by deny rule {rule.describe()}", mode)
    if mode is Mode.YOLO:
        return Decision(True, "yolo mode: allowed without asking", mode)
    if mode is Mode.PLAN:
        if read_only:
            return Decision(True, "plan mode: tool is read-only", mode)
        return Decision(False, PLAN_DENIAL, mode)
    for rule in allow:
        if rule.matches(tool, caller):
            return Decision(True, f"allowed by allow rule {rule.describe()}", mode)
    if mode is Mode.ALLOW:
        return Decision(False, f"allow mode: tool {tool!r} is not in the allow list", mode)
    return None

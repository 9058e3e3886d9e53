"""Mode: how the gate treats a tool call that no rule decides."""

from __future__ import annotations

import enum


class Mode(enum.StrEnum):
    """How the gate decides; deny rules deny in every mode. A rule matches a call when it
    matches any name the tool is known by (see ``Gate.check``'s ``aliases``).

    - ``ASK``: allow rules allow; every other call goes to the prompter.
    - ``ALLOW``: only calls an allow rule matches are allowed; every other call is denied
      (never prompted), as in Go. With no allow rules nothing runs.
    - ``YOLO``: allow everything without asking; allow rules are moot, but explicit deny rules
      are still honoured (a deny rule is a promise the operator made).
    - ``PLAN``: only calls marked read-only are allowed; allow rules do not widen this.
    """

    ASK = "ask"
    ALLOW = "allow"
    YOLO = "yolo"
    PLAN = "plan"

    @property
    def can_prompt(self) -> bool:
        """True for the modes in which the gate may ask a prompter."""
        return self in _PROMPTING_MODES


_PROMPTING_MODES = frozenset({Mode.ASK})

"""The tool permission gate: modes, rules, callers, prompters.

Map:
    _mode.py       Mode: ASK, ALLOW, YOLO, PLAN and what each one allows
    _caller.py     Caller: identity, labels, admin flag (frozen, hashable)
    _rules.py      Rule: a tool-name glob with optional caller conditions; a tool's names
    _request.py    PermissionRequest and the Prompter protocol
    _decision.py   Decision, and the pure rule-and-mode decision (no I/O)
    _gate.py       Gate: check() before every tool call, startup_check() before a run
    _terminal.py   TerminalPrompter: y/N on a terminal for the CLI
    _errors.py     the error tree (PermissionsError at the root, GateWouldDeadlock)

Deny rules win in every mode; in ASK mode the gate asks its prompter about calls that no
allow rule covers, bounded by ``prompt_timeout``. Rules are tried on every name a tool is
known by (the one it is offered under and its ``aliases``: an MCP tool's own name and
``{server}__{tool}``): any name a deny rule matches denies, any name an allow rule matches
allows, so a tool is decided alike whatever name it is offered under.
"""

from ._caller import Caller
from ._decision import Decision
from ._errors import GateWouldDeadlock, PermissionsError
from ._gate import Gate
from ._mode import Mode
from ._request import PermissionRequest, Prompter
from ._rules import Rule
from ._terminal import TerminalPrompter

__all__ = [
    "Caller",
    "Decision",
    "Gate",
    "GateWouldDeadlock",
    "Mode",
    "PermissionRequest",
    "PermissionsError",
    "Prompter",
    "Rule",
    "TerminalPrompter",
]

#: Says this package is bounded-autonomous's: ``import autonomous`` refuses a package of the
#: same name from another distribution (PyPI has one) installed in its place.
__bounded_autonomous__ = True

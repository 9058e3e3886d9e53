"""The permissions error tree.

PermissionsError
└── GateWouldDeadlock    the gate could prompt but has no prompter (ValueError)
"""

from __future__ import annotations


class PermissionsError(Exception):
    """Root of every error the permissions package raises."""


class GateWouldDeadlock(PermissionsError, ValueError):
    """The gate's mode can prompt but no prompter is set: the first prompt would never end."""

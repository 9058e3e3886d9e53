"""The ``autonomous`` console script: the CLI, or one line when the install is broken.

It lives outside the ``autonomous`` package because importing that package is what checks that
``eventlog``, ``scheduler``, ``usage`` and ``permissions`` are ours: a script inside it could
not catch the check's error, and a PyPI namesake would end the command in a traceback.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run the ``autonomous`` command; a package clash is one line on stderr and exit 2."""
    try:
        from autonomous._cli import main as command
        from autonomous._cli._signals import exit_status
    except ImportError as exc:
        if type(exc).__name__ != "PackageClash":  # any other import error is a real bug
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return exit_status(command())  # no thread a stop abandoned holds the exit

"""The check, run on import, that our top-level packages are ours, before ``autonomous`` uses them.

``eventlog``, ``usage``, ``permissions`` and ``scheduler`` are also the names of other
distributions on PyPI: installing one replaces ours in silence, and without this check the first
sign is an ImportError deep inside ``autonomous``. Each of ours says so in its ``__init__``
(``__bounded_autonomous__ = True``); this reads that line without running the package (another
distribution's package may fail in its own way on import), and asks the installed
distributions' metadata who provided an impostor only when there is one.
"""

from __future__ import annotations

import importlib.util
import sys

#: Our top-level packages that share their names with distributions on PyPI.
PACKAGES = ("eventlog", "usage", "permissions", "scheduler")

#: The line each of our packages' ``__init__`` holds.
MARKER = "__bounded_autonomous__ = True"

#: Our distribution's name.
DISTRIBUTION = "bounded-autonomous"


class PackageClash(ImportError):
    """A top-level package ``autonomous`` needs is another distribution's (or is missing).

    ``name`` is ``"autonomous"`` (the import that failed; ``python -m autonomous`` then says
    the message in one line rather than a traceback); ``package`` is the package at fault.
    """

    def __init__(self, message: str, package: str) -> None:
        super().__init__(message, name="autonomous")
        self.package = package


def check_packages() -> None:
    """Raise :class:`PackageClash` when one of :data:`PACKAGES` is not ours."""
    for name in PACKAGES:
        problem = _problem(name)
        if problem is not None:
            raise PackageClash(problem, name)


def _problem(name: str) -> str | None:
    """What is wrong with the package ``name`` as it would be imported; ``None``: it is ours."""
    module = sys.modules.get(name)
    if module is not None:  # imported already (a program that imports eventlog first)
        if getattr(module, "__bounded_autonomous__", False):
            return None
        return _clash(name, getattr(module, "__file__", None))
    spec = importlib.util.find_spec(name)
    if spec is None:
        return (
            f"{DISTRIBUTION} needs its package {name!r}, which is not installed: reinstall"
            f" {DISTRIBUTION} (pip install --force-reinstall {DISTRIBUTION})"
        )
    origin = spec.origin if spec.has_location else None
    if origin is not None and origin.endswith(".py"):
        try:
            with open(origin, encoding="utf-8", errors="replace") as file:
                if MARKER in file.read():
                    return None
        except OSError:
            pass  # unreadable: not known to be ours
    return _clash(name, origin)


def _clash(name: str, where: str | None) -> str:
    """The one-line message for a package ``name`` at ``where`` that is somebody else's."""
    others = _providers(name)
    place = f" at {where}" if where else ""
    if others:
        who = " and ".join(repr(other) for other in others)
        cause = f"it is the distribution {who}'s"
        fix = f"uninstall it (pip uninstall {' '.join(others)}) and reinstall {DISTRIBUTION}"
    else:
        cause = "no installed distribution claims it"
        fix = "take it off the import path"
    return (
        f"the package {name!r}{place} is not {DISTRIBUTION}'s: {cause}; {fix}, or give"
        f" {DISTRIBUTION} a separate virtual environment"
    )


def _providers(name: str) -> list[str]:
    """The distributions other than ours that say they provide the top-level ``name``."""
    from importlib.metadata import packages_distributions  # only on the error path: it scans

    ours = DISTRIBUTION.replace("-", "_").lower()
    found = packages_distributions().get(name, [])
    return sorted({d for d in found if d.replace("-", "_").lower() != ours})


check_packages()  # on import: ``autonomous`` imports this module before anything else

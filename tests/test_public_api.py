"""The public faces: the contract's names import, __all__ is complete, errors are exported."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

PACKAGES = ["autonomous", "eventlog", "usage", "permissions", "scheduler"]

CONTRACT = {
    "autonomous": [
        "Agent", "function_tool", "start_autonomous", "run_autonomous", "resume_autonomous",
        "AutonomousHandle", "AutonomousStatus", "RunResult", "StopReason", "RetryDecision",
        "AutonomousError",
    ],
    "eventlog": [
        "SqliteEventLog", "MemoryEventLog", "SessionRef", "SessionLocked", "EventLogError",
        "LeaseLost", "SessionFinished",
    ],
    "usage": ["Pricing", "Tracker"],
    "permissions": ["Gate", "Mode", "Caller"],
    "scheduler": ["SleepScheduler", "ExitOnDeferScheduler", "ScheduleEvent", "Defer"],
}  # fmt: skip


ROOTS = {
    "autonomous": "AutonomousError",
    "eventlog": "EventLogError",
    "usage": "UsageError",
    "permissions": "PermissionsError",
    "scheduler": "SchedulerError",
}


class TestPublicFace:
    @pytest.mark.parametrize("package", PACKAGES)
    def test_the_contract_names_are_exported(self, package: str) -> None:
        """Every name DESIGN.md section 3 promises is importable from its package."""
        module = importlib.import_module(package)
        assert [] == [n for n in CONTRACT[package] if n not in module.__all__]

    @pytest.mark.parametrize("package", PACKAGES)
    def test_every_exported_name_exists_and_is_documented(self, package: str) -> None:
        """__all__ names resolve, and every exported class and function has a docstring."""
        module = importlib.import_module(package)
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        undocumented = [
            n
            for n in module.__all__
            if (
                inspect.isclass(getattr(module, n, None))
                or inspect.isfunction(getattr(module, n, None))
            )
            and not inspect.getdoc(getattr(module, n))
        ]
        assert ([], []) == (missing, undocumented)

    @pytest.mark.parametrize("package", PACKAGES)
    def test_every_exception_class_is_exported(self, package: str) -> None:
        """Each error under the package's root error is part of its public face."""
        module = importlib.import_module(package)
        root = getattr(module, ROOTS[package])
        defined = set()
        for info in pkgutil.iter_modules(module.__path__):
            sub = importlib.import_module(f"{package}.{info.name}")
            for name, obj in vars(sub).items():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, root)
                    and obj.__module__ == sub.__name__
                    and not name.startswith("_")
                ):
                    defined.add(name)
        assert set() == defined - set(module.__all__)

    @pytest.mark.parametrize("package", PACKAGES)
    def test_every_module_states_its_purpose(self, package: str) -> None:
        """Every module of the package opens with a docstring."""
        module = importlib.import_module(package)
        bare = [
            info.name
            for info in pkgutil.iter_modules(module.__path__)
            if not (importlib.import_module(f"{package}.{info.name}").__doc__ or "").strip()
        ]
        assert [] == bare


def test_importing_the_library_does_not_import_litellm() -> None:
    """Importing every package stays offline and fast: litellm is loaded only when used."""
    code = (
        "import sys, autonomous, eventlog, usage, permissions, scheduler;"
        "print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "False" == out.stdout.strip()


def test_the_fleet_face() -> None:
    """autonomous.fleet exports Daemon and AdoptedLease, each documented; the old top-level
    name of AdoptedLease still finds it, silently, but is no longer in autonomous.__all__."""
    import warnings

    import autonomous
    import autonomous.fleet

    assert ["AdoptedLease", "Daemon"] == sorted(autonomous.fleet.__all__)
    assert all(inspect.getdoc(getattr(autonomous.fleet, n)) for n in autonomous.fleet.__all__)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert autonomous.fleet.AdoptedLease is autonomous.AdoptedLease
    assert "AdoptedLease" not in autonomous.__all__
    with pytest.raises(AttributeError, match="no_such_name"):
        autonomous.no_such_name  # noqa: B018

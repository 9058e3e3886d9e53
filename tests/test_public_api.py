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


#: The top level of ``autonomous``: the contract and the vocabulary a run uses (its tools,
#: models, messages, options, progress events, supervisors, send_inject/send_control and the
#: errors). Spec files, local models and the event codec have public modules of their own.
#: ``AdoptedLease`` is left out either way: its move to ``autonomous.fleet`` is another change.
TOP_LEVEL = {
    "autonomous": {
        "AbortRun", "Agent", "AutonomousError", "AutonomousHandle", "AutonomousStatus",
        "BuildError", "BuildFn", "CheckpointWritten", "ConfigurationError", "GateWouldDeadlock",
        "HistorySummarized", "LLMJudge", "MCPServerError", "Message", "Model", "ModelCallLimit",
        "ModelCalled", "ModelCalling", "ModelError", "ModelResponse", "PauseRun", "Paused",
        "Proceed", "ProgressEvent", "RebuildFn", "Resumed", "RetryDecision", "RulesSupervisor",
        "RunExited", "RunFinished", "RunKwargs", "RunOptions", "RunResult", "Sleeping", "Steer",
        "StopReason", "Supervisor", "SupervisorDecision", "SupervisorSnapshot", "Telemetry",
        "Tool", "ToolArgumentError", "ToolCall", "ToolCallContext", "ToolCalled", "ToolCalling",
        "ToolOutcome", "ToolTimeoutError", "TurnError", "TurnFinished", "TurnStarted",
        "TurnTimeout", "Woke", "current_tool_call", "function_tool", "resume_autonomous",
        "retry", "run_autonomous", "send_control", "send_inject", "start_autonomous",
    },
}  # fmt: skip

#: Names that left a package's top level, and the public module each lives in now.
MOVED = {
    ("autonomous", "AgentSpec"): "autonomous.spec",
    ("autonomous", "SpecProblem"): "autonomous.spec",
    ("autonomous", "load_spec"): "autonomous.spec",
    ("autonomous", "validate_spec"): "autonomous.spec",
    ("autonomous", "LocalModelUnavailable"): "autonomous.local",
    ("autonomous", "register_local_models"): "autonomous.local",
    ("eventlog", "decode_payload"): "eventlog.codec",
    ("eventlog", "encode_payload"): "eventlog.codec",
    ("eventlog", "event_from_dict"): "eventlog.codec",
    ("eventlog", "event_to_dict"): "eventlog.codec",
}
#: The public modules beside the packages' top levels.
FACES = ["autonomous.spec", "autonomous.local", "eventlog.codec"]


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

    @pytest.mark.parametrize("package", PACKAGES + FACES)
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


class TestSmallerFace:
    def test_the_top_level_exports_exactly_the_run_vocabulary(self) -> None:
        """autonomous's __all__ is the contract and a run's vocabulary, nothing of the edges."""
        module = importlib.import_module("autonomous")
        assert TOP_LEVEL["autonomous"] == set(module.__all__) - {"AdoptedLease"}

    @pytest.mark.parametrize(("package", "name"), sorted(MOVED))
    def test_a_moved_name_is_exported_by_its_new_module(self, package: str, name: str) -> None:
        """Each moved name is in the __all__ of the public module it moved to."""
        assert name in importlib.import_module(MOVED[package, name]).__all__

    @pytest.mark.parametrize(("package", "name"), sorted(MOVED))
    def test_a_moved_name_leaves_the_top_level(self, package: str, name: str) -> None:
        """A moved name is in neither the package's __all__ nor its dir(), even once used."""
        module = importlib.import_module(package)
        getattr(module, name)
        assert (False, False) == (name in module.__all__, name in dir(module))

    @pytest.mark.parametrize(("package", "name"), sorted(MOVED))
    def test_an_old_name_still_reaches_the_same_object(self, package: str, name: str) -> None:
        """``from package import name`` keeps working, silently, for programs written before."""
        new = getattr(importlib.import_module(MOVED[package, name]), name)
        namespace: dict[str, object] = {}
        exec(f"from {package} import {name}", namespace)
        assert new is namespace[name]

    def test_a_renamed_name_still_reaches_the_same_object(self) -> None:
        """eventlog's time function, once ``Clock`` like scheduler's sleeping clock, is ``Now``;
        the old name still finds it, silently, and is no longer exported."""
        import eventlog

        namespace: dict[str, object] = {}
        exec("from eventlog import Clock", namespace)
        assert eventlog.Now is namespace["Clock"]
        assert ("Now", False, False) == (
            next(n for n in eventlog.__all__ if n == "Now"),
            "Clock" in eventlog.__all__,
            "Clock" in dir(eventlog),
        )

    @pytest.mark.parametrize("package", ["autonomous", "eventlog"])
    def test_an_unknown_name_is_still_an_attribute_error(self, package: str) -> None:
        """The compatibility lookup answers only the moved names."""
        with pytest.raises(AttributeError, match="no_such_name"):
            _ = importlib.import_module(package).no_such_name


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


def test_importing_the_public_modules_does_not_import_litellm_or_llama_cpp() -> None:
    """autonomous.local, autonomous.spec and eventlog.codec load litellm and llama.cpp only
    when a local model is used."""
    code = (
        "import sys, autonomous.local, autonomous.spec, eventlog.codec;"
        "print('litellm' in sys.modules, 'llama_cpp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "False False" == out.stdout.strip()

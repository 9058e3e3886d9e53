"""The permissions package's public face: __all__, exceptions, docstrings."""

from __future__ import annotations

import inspect

import permissions
from permissions import _errors


class TestPublicApi:
    """What ``import permissions`` offers."""

    def test_all_is_the_public_namespace(self) -> None:
        """__all__ lists exactly the public names the package defines."""
        public = {
            name
            for name, value in vars(permissions).items()
            if not name.startswith("_") and not inspect.ismodule(value)
        }
        assert sorted(public) == sorted(permissions.__all__)

    def test_contract_names(self) -> None:
        """The names the design and the driver rely on are exported."""
        expected = {"Gate", "Mode", "Caller", "Rule", "Decision", "PermissionRequest", "Prompter"}
        assert expected | {"TerminalPrompter", "PermissionsError", "GateWouldDeadlock"} <= set(
            permissions.__all__
        )

    def test_mode_values(self) -> None:
        """Mode has the four documented values, as strings."""
        assert ["ask", "allow", "yolo", "plan"] == [str(mode) for mode in permissions.Mode]

    def test_every_exception_is_exported(self) -> None:
        """Every exception class of the package is exported and derives from PermissionsError."""
        errors = {
            name
            for name, value in vars(_errors).items()
            if inspect.isclass(value) and issubclass(value, BaseException)
        }
        assert errors <= set(permissions.__all__)
        assert all(
            issubclass(getattr(permissions, name), permissions.PermissionsError) for name in errors
        )

    def test_every_public_name_has_a_docstring(self) -> None:
        """Every exported name, and every public method or property on it, has a docstring."""
        missing = []
        for name in permissions.__all__:
            obj = getattr(permissions, name)
            if not inspect.getdoc(obj):
                missing.append(name)
            for attr, member in vars(obj).items():
                if attr.startswith("_") or (
                    not callable(member) and not isinstance(member, property)
                ):
                    continue
                if not inspect.getdoc(member):
                    missing.append(f"{name}.{attr}")
        assert [] == missing

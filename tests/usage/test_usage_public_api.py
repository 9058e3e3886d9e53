"""The usage package's public face: __all__, exceptions, docstrings."""

from __future__ import annotations

import inspect

import usage
from usage import _errors


class TestPublicApi:
    """What ``import usage`` offers."""

    def test_all_is_the_public_namespace(self) -> None:
        """__all__ lists exactly the public names the package defines."""
        public = {
            name
            for name, value in vars(usage).items()
            if not name.startswith("_") and not inspect.ismodule(value)
        }
        assert sorted(public) == sorted(usage.__all__)

    def test_contract_names(self) -> None:
        """The names the design promises are exported."""
        expected = {"Usage", "Pricing", "Tracker", "UsageRow", "UsageTotals", "UsageError"}
        assert expected | {"UnknownModel"} <= set(usage.__all__)

    def test_every_exception_is_exported(self) -> None:
        """Every exception class of the package is in __all__ and derives from UsageError."""
        errors = {
            name
            for name, value in vars(_errors).items()
            if inspect.isclass(value) and issubclass(value, BaseException)
        }
        assert errors <= set(usage.__all__)
        assert all(issubclass(getattr(usage, name), usage.UsageError) for name in errors)

    def test_every_public_name_has_a_docstring(self) -> None:
        """Every exported name, and every public method or property on it, has a docstring."""
        missing = []
        for name in usage.__all__:
            obj = getattr(usage, name)
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

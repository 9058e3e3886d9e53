"""References in agent specs: ``module:function`` names of tools and scripted model factories.

A reference's module is imported with the spec's directory (the agent's own directory) first on
``sys.path``; it stays there so the module's own imports work. A module name that is already
imported from somewhere else while the agent's directory has its own file is refused: module names
must be unique across the specs one process runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .._errors import ConfigurationError
from .._model import Model
from .._tools._tools import Tool, function_tool

__all__ = ["SCRIPTED", "ToolRef", "import_ref", "scripted_factory", "tool_from_ref"]

#: The prefix of a model reference naming a factory of a scripted (offline) model.
SCRIPTED = "scripted:"


@attrs.frozen
class ToolRef:
    """A tool named in a spec: a ``module:function`` reference and optional overrides."""

    ref: str
    name: str | None = None
    description: str | None = None
    read_only: bool = False
    timeout: float | None = None


def import_ref(ref: str, base_dir: Path) -> Any:
    """The object ``module:attribute`` names, importing the module from ``base_dir`` first.

    ``base_dir`` is put on ``sys.path`` (and stays there, for the module's own imports).
    """
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name.strip() or not attribute.strip():
        raise ConfigurationError(f"{ref!r} is not a 'module:function' reference")
    base = str(base_dir.resolve())
    if base not in sys.path:
        sys.path.insert(0, base)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigurationError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    _check_origin(module, module_name, Path(base))
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(f"module {module_name!r} has no {attribute!r}") from None
    return target


def _check_origin(module: Any, module_name: str, base: Path) -> None:
    """Refuse a module already imported from elsewhere while the agent's directory has its own."""
    local = base.joinpath(*module_name.split("."))
    if not (local.with_suffix(".py").exists() or (local / "__init__.py").exists()):
        return
    origin = getattr(module, "__file__", None)
    if origin is None or not Path(origin).resolve().is_relative_to(base):
        raise ConfigurationError(
            f"module {module_name!r} is already imported from {origin}, not from {base}: "
            "give the agent's module a unique name"
        )


def tool_from_ref(ref: ToolRef, base_dir: Path) -> Tool:
    """The Tool a reference names: a Tool object as is, a function through function_tool."""
    target = import_ref(ref.ref, base_dir)
    if isinstance(target, Tool):
        return target
    if not callable(target):
        raise ConfigurationError(f"{ref.ref!r} is not callable")
    try:
        tool: Tool = function_tool(
            target,
            name=ref.name,
            description=ref.description,
            read_only=ref.read_only,
            timeout=ref.timeout,
        )
    except (ConfigurationError, TypeError, ValueError) as exc:
        raise ConfigurationError(f"{ref.ref!r}: {exc}") from exc
    return tool


def scripted_factory(model: str, base_dir: Path) -> Callable[[], Model]:
    """A callable making a new scripted model from ``"scripted:module:function"``."""
    ref = model.removeprefix(SCRIPTED)
    factory = import_ref(ref, base_dir)
    if not callable(factory):
        raise ConfigurationError(f"{ref!r} is not callable")

    def make() -> Model:
        """A new model from the factory, checked."""
        made = factory()
        if not isinstance(made, Model):
            raise ConfigurationError(f"{ref!r} returned {made!r}, not a Model")
        return made

    return make

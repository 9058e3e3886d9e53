"""The specs a daemon loads again and again: parsed, validated and built once per file version.

A daemon resumes thousands of sessions of a few spec files. Each resume still reads the file
and hashes its bytes (its identity, which the caller checks against the one the session
recorded), but the parse, the validation and the import of its tools and model factory happen
only for bytes not seen before: one entry per path, replaced when the file changes. How a
file is loaded (validated, and its errors reported) is the caller's: the daemon passes its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs

from eventlog import SessionRef

from ._spec import AgentSpec, SessionBuild, file_identity


@attrs.define
class _Loaded:
    """A spec as loaded, and its builder once one was asked for."""

    spec: AgentSpec
    builder: Callable[[SessionRef], SessionBuild] | None = None


@attrs.frozen
class _Version:
    """One version of a spec file: its identity, and what was loaded of it by model override."""

    identity: str
    by_model: dict[str | None, _Loaded] = attrs.field(factory=dict)


#: Loads the spec at a path, with a model in place of its own when one is given.
SpecLoader = Callable[[str, str | None], AgentSpec]


class SpecCache:
    """Specs by absolute path and the digest of the file's bytes (see the module docstring),
    each loaded by ``load`` (which raises for a spec that does not load)."""

    def __init__(self, load: SpecLoader) -> None:
        self._load = load
        self._versions: dict[Path, _Version] = {}

    def load(self, path: str, model: str | None) -> AgentSpec:
        """The spec at ``path`` (with ``model`` in place of its own when given) as the cache's
        loader gives it, the same object while the file's bytes are unchanged; a spec that
        does not load raises each time, and is not cached."""
        where = Path(path).absolute()
        identity = file_identity(where)
        version = self._versions.get(where)
        if version is None or version.identity != identity:
            version = _Version(identity)
        if model in version.by_model:
            return version.by_model[model].spec
        spec = self._load(path, model)
        if file_identity(where) == identity:  # the bytes validated are the bytes hashed
            version.by_model[model] = _Loaded(spec)
            self._versions[where] = version
        return spec

    def builder(self, spec: AgentSpec) -> Callable[[SessionRef], SessionBuild]:
        """``spec.builder()`` (its tools and model factory imported), made once for a spec
        this cache gave; made afresh for any other."""
        version = self._versions.get(spec.path.absolute())
        loaded = version.by_model.values() if version is not None else ()
        found = next((entry for entry in loaded if entry.spec is spec), None)
        if found is None:
            return spec.builder()
        if found.builder is None:
            found.builder = spec.builder()
        return found.builder

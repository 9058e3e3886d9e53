"""The daemon's spec cache: one parse, validation and build per version of a spec file."""

from __future__ import annotations

from pathlib import Path

import pytest

from autonomous._cli._common import CliError, load_session_spec
from autonomous.spec._cache import SpecCache
from eventlog import MemoryEventLog, SessionRef

from .conftest import write_spec


class TestSpecCache:
    """Loads are shared while a file's bytes stay the same, and redone when they change."""

    def test_an_unchanged_file_gives_the_same_spec_and_builder(self, in_process: Path) -> None:
        """Two loads of an unchanged file are one spec, whose builder is made once."""
        path = write_spec(in_process, "cached", "quick")
        cache = SpecCache(load_session_spec)
        spec = cache.load(str(path), None)
        assert spec is cache.load(str(path), None)
        assert cache.builder(spec) is cache.builder(spec)

    def test_an_edited_file_is_loaded_again(self, in_process: Path) -> None:
        """After an edit the load is the new file's, with its new identity."""
        path = write_spec(in_process, "cached", "quick")
        cache = SpecCache(load_session_spec)
        before = cache.load(str(path), None)
        write_spec(in_process, "cached", "quick", max_turns=7)
        after = cache.load(str(path), None)
        assert (400, 7) == (before.budgets["max_turns"], after.budgets["max_turns"])
        assert before.identity == after.identity  # both read the file as it is now
        assert after is cache.load(str(path), None)

    def test_a_file_edited_into_errors_is_refused_every_time(self, in_process: Path) -> None:
        """A spec that no longer validates raises at each load; it is never served stale."""
        path = write_spec(in_process, "cached", "quick")
        cache = SpecCache(load_session_spec)
        cache.load(str(path), None)
        path.write_text(path.read_text().replace('model = "scripted:brains:quick"\n', ""))
        for _ in range(2):
            with pytest.raises(CliError, match="model"):
                cache.load(str(path), None)

    def test_a_model_override_is_a_spec_of_its_own(self, in_process: Path) -> None:
        """The session's model override replaces the spec's model; the plain spec is kept."""
        path = write_spec(in_process, "cached", "quick")
        cache = SpecCache(load_session_spec)
        plain = cache.load(str(path), None)
        other = cache.load(str(path), "scripted:brains:looping")
        assert ("scripted:brains:quick", "scripted:brains:looping") == (plain.model, other.model)
        assert other is cache.load(str(path), "scripted:brains:looping")
        assert cache.builder(plain) is not cache.builder(other)

    def test_a_builder_makes_each_sessions_build(self, in_process: Path) -> None:
        """One builder gives each session an agent of its own, on that session."""
        path = write_spec(in_process, "cached", "quick")
        cache = SpecCache(load_session_spec)
        builder = cache.builder(cache.load(str(path), None))
        log = MemoryEventLog()
        agents = [builder(SessionRef(log, "tests", "tester", s))([]) for s in ("a", "b")]
        assert ["a", "b"] == [a.session.session_id for a in agents if a.session is not None]
        assert agents[0].tools == agents[1].tools  # the tools imported once, shared

"""Specification of the run options' types: RunKwargs says what RunOptions takes."""

from __future__ import annotations

import inspect
import typing

import attrs

from autonomous import (
    RunKwargs,
    RunOptions,
    _options,
    resume_autonomous,
    run_autonomous,
    start_autonomous,
)


class TestRunKwargs:
    def test_every_option_is_a_key_and_nothing_else(self) -> None:
        """RunKwargs has one key per field of RunOptions, and no other."""
        fields = {field.name for field in attrs.fields(RunOptions)}
        assert (fields, frozenset()) == (
            set(RunKwargs.__annotations__),
            RunKwargs.__required_keys__,
        )

    def test_each_key_is_typed_as_the_option_takes_it(self) -> None:
        """A key's type is the type RunOptions' constructor takes for that option."""
        takes = typing.get_type_hints(RunOptions.__init__, globalns=vars(_options))
        takes.pop("return")
        assert takes == typing.get_type_hints(RunKwargs)

    def test_the_entry_points_take_run_kwargs(self) -> None:
        """All three entry points take their options as ``**options: Unpack[RunKwargs]``."""
        for entry in (run_autonomous, start_autonomous, resume_autonomous):
            options = inspect.signature(entry).parameters["options"]
            assert (inspect.Parameter.VAR_KEYWORD, "Unpack[RunKwargs]") == (
                options.kind,
                options.annotation,
            )

"""Agent spec files: a TOML file that names an agent's model, tools, budgets and scheduler.

The ``autonomous`` command and its daemon run specs; a program can load one too
(``load_spec(path).build_function(ref)``) or check one (``validate_spec(path)``).

Map:
    _spec.py       the spec as a value: AgentSpec, and Problem (public as SpecProblem)
    _reader.py     reading spec files: load_spec, read_spec (every problem, with its line)
    _lines.py      where a TOML file sets each key (line numbers for problems)
    _refs.py       module:function references in specs
    _durations.py  durations as people write them (30m, 1h)
    _hooks.py      the on_exit hook as validate checks it: its program and timeout
    _validate.py   validate (the static checks of a spec), validated_spec
    _cache.py      the daemon's specs: parsed, validated and built once per file version
"""

from ._reader import load_spec
from ._spec import AgentSpec
from ._spec import Problem as SpecProblem
from ._validate import validate as validate_spec

__all__ = ["AgentSpec", "SpecProblem", "load_spec", "validate_spec"]

"""The ``autonomous`` command: validate, run and resume agent specs; list, show and control
sessions in an event log; and ``daemon``, which resumes sessions when they are due.

Map:
    _main.py       the parser, logging set-up and dispatch
    _common.py     exit codes, the log, session names, the spec note, signals
    _run.py        run and resume, with live progress
    _inspect.py    ls, show, inject, pause, unpause, stop
    _daemon.py     daemon
    _validate.py   validate (the static checks of a spec)
    _refs.py       module:function references in specs
    _spec.py       the spec file format: AgentSpec, load_spec

Exit status: 0 done; 1 a run that failed (retry_policy_aborted, lease_lost) or a spec with errors;
2 a usage or configuration error; 3 a session another process holds; 130 after Ctrl-C (143 after
SIGTERM), once the run has stopped cleanly and written its final checkpoint.
"""

from ._main import main

__all__ = ["main"]

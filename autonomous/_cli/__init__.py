"""The ``autonomous`` command: validate, run and resume agent specs; list, show and control
sessions in an event log; and ``daemon``, which resumes sessions when they are due.

Map:
    _main.py       the parser, logging set-up and dispatch
    _exits.py      the exit statuses
    _durations.py  durations as people write them (30m, 1h)
    _common.py     the log, session names, the spec note, signals
    _run.py        run and resume
    _status.py     their progress: a live status line on a terminal, plain lines otherwise
    _times.py      times with their date and zone, spans, wakes relative to now
    _ls.py         ls (with its filters)
    _show.py       show (the timeline, and --follow)
    _inspect.py    inject, pause, unpause, stop
    _daemon.py     daemon
    _validate.py   validate (the static checks of a spec)
    _refs.py       module:function references in specs
    _spec.py       the spec file format: AgentSpec, load_spec

Exit status: see :class:`._exits.Exit` (0 completed, 10 deferred, 11 budget, 12 aborted,
13 failed, 14 lease lost, 15 stopped, 1 the command could not do it, 2 usage, 3 locked, 4 the
store; 130/143 after SIGINT/SIGTERM once the final checkpoint is written).
"""

from ._main import main

__all__ = ["main"]

"""What this host's process table says about a lease holder: alive, a zombie, or a reused pid.

Linux's ``/proc/<pid>/stat`` gives a process's state and its start time (clock ticks since
boot): a pid the kernel gave to a new process after the holder died has another start time.
Where ``/proc`` is missing, only a signal probe can tell, and a start time cannot be compared.
"""

from __future__ import annotations

import os

#: Where the process table is read (a parameter, so that tests can point it at nothing).
PROC = "/proc"

#: Index of the start time among the fields after the command name in ``/proc/<pid>/stat``
#: (field 22 of the file; fields 1 and 2 are the pid and the command, so 22 - 3).
_START_FIELD = 19


def process_stat(pid: int, proc: str = PROC) -> tuple[str, str] | None:
    """The (state, start time) of process ``pid``, or ``None`` when ``proc`` cannot tell.

    Raises :class:`ProcessLookupError` when ``proc`` is there and has no such process.
    """
    if not os.path.isdir(os.path.join(proc, "self")):
        return None
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as file:
            text = file.read().decode("ascii", "replace")
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    except OSError:  # unreadable here (another namespace, a hardened /proc): cannot tell
        return None
    # The command name is in parentheses and may itself hold spaces and ")": split after the last.
    fields = text[text.rfind(")") + 1 :].split()
    if len(fields) <= _START_FIELD:
        return None
    return fields[0], fields[_START_FIELD]


def process_start(pid: int, proc: str = PROC) -> str:
    """The start time of process ``pid`` as text (clock ticks since boot); ``""`` when unknown."""
    try:
        stat = process_stat(pid, proc)
    except ProcessLookupError:
        return ""
    return "" if stat is None else stat[1]


def kill_probe(pid: int) -> bool:
    """Whether signal 0 finds process ``pid`` (a zombie still counts: the probe cannot tell)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError included: the process exists, it is not ours
        return True
    return True

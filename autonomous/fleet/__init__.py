"""The fleet: daemons that resume a log's sessions when they are due, as library objects.

``Daemon(log, build, ...)`` is what ``autonomous daemon`` runs, for a program's own event
loop: ``await daemon.run()`` or ``async with daemon:``. ``AdoptedLease`` is how a daemon lends
a claimed session's lease to the run it resumes (``resume_autonomous(..., lease=...)``); it is
defined in the core (``autonomous._durable``), which must not import this edge.

Map:
    _claims.py    Claimer: the claims, the leases' heartbeat, releases, hand-backs, retries
    _daemon.py    Daemon: a claimed session resumed with a build function
"""

from .._durable._durable import AdoptedLease
from ._daemon import Daemon

__all__ = ["AdoptedLease", "Daemon"]

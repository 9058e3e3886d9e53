"""schedule_next_turn support: the Scheduler protocol, SleepScheduler, ExitOnDeferScheduler, clocks.

Map:
    _scheduler.py   Scheduler / Waker protocols, ScheduleEvent, Defer, the two schedulers
    _clock.py       Clock protocol, SystemClock, FakeClock (tests)
"""

from ._clock import Clock, FakeClock, SystemClock
from ._scheduler import (
    Defer,
    ExitOnDeferScheduler,
    ScheduleEvent,
    Scheduler,
    SchedulerError,
    SleepScheduler,
    Waker,
)

__all__ = [
    "Clock",
    "Defer",
    "ExitOnDeferScheduler",
    "FakeClock",
    "ScheduleEvent",
    "Scheduler",
    "SchedulerError",
    "SleepScheduler",
    "SystemClock",
    "Waker",
]

#: Says this package is bounded-autonomous's: ``import autonomous`` refuses a package of the
#: same name from another distribution (PyPI has one) installed in its place.
__bounded_autonomous__ = True

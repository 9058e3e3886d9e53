"""Shared hypothesis strategies: session keys, every event payload type, and whole events.

Payload strategies are derived from the attrs field types of each payload class, so a field added
to a payload is generated (and round-tripped by the tests) the day it is added. Text is kept
small so that the suites stay fast.
"""

from __future__ import annotations

import types
import typing
from datetime import UTC, datetime, timedelta, timezone
from functools import cache
from typing import Any

import attrs
from hypothesis import strategies as st

from eventlog import Checkpoint, Control, Event, EventKind, Payload, SessionKey, UserMessage
from eventlog._events import PAYLOAD_TYPES

#: Short unicode text (no surrogates): names, messages, ids.
small_text = st.text(max_size=8)

#: Aware datetimes in UTC and in two other fixed offsets, to the microsecond.
aware_datetimes = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-7))]
    ),
)

#: Values that survive JSON unchanged (what a ``result`` or a note's ``data`` may hold).
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | small_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(small_text, children, max_size=3)
    ),
    max_leaves=6,
)

_SCALARS: dict[Any, st.SearchStrategy[Any]] = {
    str: small_text,
    int: st.integers(min_value=-(10**9), max_value=10**12),
    float: st.floats(allow_nan=False, allow_infinity=False),
    bool: st.booleans(),
    datetime: aware_datetimes,
    type(None): st.none(),
    Any: json_values,
}


def for_type(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for one field type of a payload class (attrs classes are built field by field)."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return st.one_of([for_type(arg) for arg in args])
    if origin is tuple:
        return st.lists(for_type(args[0]), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(for_type(args[0]), for_type(args[1]), max_size=3)
    if isinstance(tp, type) and attrs.has(tp):
        return attrs_instances(tp)
    raise TypeError(f"no strategy for field type {tp!r}: add one to tests/strategies.py")


@cache
def attrs_instances(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Instances of an attrs class with every field drawn from its type."""
    hints = typing.get_type_hints(cls)
    fields = {field.name: for_type(hints[field.name]) for field in attrs.fields(cls)}
    return st.builds(cls, **fields)


def payloads_of(kind: EventKind) -> st.SearchStrategy[Payload]:
    """Payloads of one event kind."""
    payload_type: type = PAYLOAD_TYPES[kind]  # mypy holds type[Any] not Hashable; a class is
    return attrs_instances(payload_type)


#: A payload of any kind.
payloads: st.SearchStrategy[Payload] = st.one_of([payloads_of(kind) for kind in EventKind])

#: Session keys from small text.
session_keys = st.builds(SessionKey, small_text, small_text, small_text)


def events(
    payload: st.SearchStrategy[Payload] = payloads,
    keys: st.SearchStrategy[SessionKey] = session_keys,
) -> st.SearchStrategy[Event]:
    """Not yet appended events (``seq == 0``) with the given payloads."""
    return st.builds(
        lambda key, body, author, at: Event.create(key, body, author=author, at=at),
        keys,
        payload,
        small_text,
        aware_datetimes,
    )


#: Events as a store returns them: with a ``seq`` and a random hex id.
stored_events = st.builds(
    lambda event, seq, event_id: attrs.evolve(event, seq=seq, id=event_id),
    events(),
    st.integers(min_value=1, max_value=2**62),
    st.text(alphabet="0123456789abcdef", min_size=24, max_size=24),
)


def summary_events(key: SessionKey, base: datetime) -> st.SearchStrategy[Event]:
    """Events of session ``key`` that move its summary, at times a few minutes around
    ``base``: checkpoints (mostly deferred, else completed or mid-run; with a wake time or
    none; now and then stopped or paused), control requests (mostly wakes; stops, pauses,
    resumes) and, moving nothing, a user message. Weighted so that a few events often hold a
    deferred checkpoint and a wake after it, the case with the most rules."""
    near = st.integers(min_value=-3, max_value=3).map(lambda m: base + timedelta(minutes=m))
    rarely = st.sampled_from([False, False, False, True])
    checkpoint = st.builds(
        lambda turns, reason, wake, stopped, paused, at: Event.create(
            key,
            Checkpoint(
                turns, 10, 5, 0.25, "go", stop_reason=reason, next_wake_at=wake,
                stopped=stopped, paused=paused,
            ),
            at=at,
        ),
        st.integers(min_value=1, max_value=9),
        st.sampled_from(["deferred", "deferred", "deferred", None, "completed"]),
        _weighted([near, near, near, st.none()]),
        rarely,
        rarely,
        near,
    )  # fmt: skip
    control = st.builds(
        lambda action, at: Event.create(key, Control(action), at=at),
        st.sampled_from(["wake", "wake", "wake", "stop", "pause", "resume"]),
        near,
    )
    message = near.map(lambda at: Event.create(key, UserMessage("hi", 1), at=at))
    return _weighted([checkpoint, checkpoint, control, control, control, message])


def _weighted(choices: list[st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of ``choices``, each as often as it is listed (``st.one_of`` counts a strategy
    listed twice once)."""
    return st.sampled_from(choices).flatmap(lambda chosen: chosen)

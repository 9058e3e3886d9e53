"""Event JSON: every payload kind round-trips, and the package's public face is complete."""

from __future__ import annotations

import inspect
import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eventlog
import eventlog._events
from eventlog import (
    SCHEMA_VERSION,
    Checkpoint,
    CorruptEvent,
    Event,
    EventKind,
    EventLogError,
    Note,
    Payload,
    UnknownSchemaVersion,
    UserMessage,
)
from eventlog.codec import decode_payload, encode_payload, event_from_dict, event_to_dict
from tests.strategies import payloads_of, stored_events


class _Opaque:
    def __str__(self) -> str:
        return "opaque"


class TestPayloadRoundTrip:
    """encode_payload / decode_payload, for every kind."""

    @pytest.mark.parametrize("kind", list(EventKind))
    @settings(max_examples=30)
    @given(data=st.data())
    def test_every_kind(self, kind: EventKind, data: st.DataObject) -> None:
        """A payload of each kind decodes to what was encoded."""
        payload: Payload = data.draw(payloads_of(kind))
        assert payload == decode_payload(kind, encode_payload(payload), v=SCHEMA_VERSION)

    @pytest.mark.parametrize(
        "value",
        [2**70, -(2**80), {"n": [2**64, "x"]}, "lone \ud800 surrogate", 1.5, None],
        ids=["wide-int", "wide-negative", "nested-wide", "surrogate", "float", "none"],
    )
    def test_values_beyond_strict_json_round_trip(self, value: object) -> None:
        """A value orjson refuses (a wide integer, a lone surrogate) is written all the same
        and reads back exactly."""
        payload = Note("n", {"value": value})
        text = encode_payload(payload)
        assert payload == decode_payload("note", text, v=SCHEMA_VERSION)

    def test_non_string_keys_are_written_as_text(self) -> None:
        """A dict with non-string keys is written (its keys as JSON text), not refused."""
        text = encode_payload(Note("n", {"value": {1: "a", 2: "b"}}))
        assert {"value": {"1": "a", "2": "b"}} == json.loads(text)["data"]

    def test_a_float_that_is_not_finite_is_written_as_null(self) -> None:
        """NaN and infinities have no JSON form: they are written as null, so the stored text
        is strict JSON that any reader takes."""
        text = encode_payload(Note("n", {"values": [math.nan, math.inf, -math.inf]}))
        assert {"values": [None, None, None]} == json.loads(text)["data"]

    def test_values_json_has_no_form_for_are_written_as_text(self) -> None:
        """An object JSON cannot hold is written as its text, never refused."""
        text = encode_payload(Note("n", {"value": _Opaque()}))
        assert {"value": "opaque"} == json.loads(text)["data"]

    def test_other_version_fails_fast(self) -> None:
        """A payload of another schema version raises UnknownSchemaVersion, naming it."""
        with pytest.raises(UnknownSchemaVersion, match="schema version 2"):
            decode_payload("note", '{"text": "x"}', v=2, session="a/b/c", seq=5, event_id="e")


class TestNewFields:
    """Fields added to payloads read back, and rows written before them still decode."""

    def test_rows_written_before_the_fields_decode_with_defaults(self) -> None:
        """A checkpoint and a user message without the new fields get their defaults."""
        checkpoint = decode_payload(
            "checkpoint",
            '{"turns":1,"input_tokens":2,"output_tokens":3,"cost_usd":0.5,"next_prompt":"go"}',
            v=SCHEMA_VERSION,
        )
        message = decode_payload("user_message", '{"text":"hi","turn":1}', v=SCHEMA_VERSION)
        assert (Checkpoint(1, 2, 3, 0.5, "go"), UserMessage("hi", 1)) == (checkpoint, message)
        assert isinstance(checkpoint, Checkpoint) and isinstance(message, UserMessage)
        assert (False, False, 0, ()) == (
            checkpoint.paused,
            checkpoint.stopped,
            checkpoint.unseen_from,
            message.inbox_ids,
        )

    def test_set_fields_round_trip(self) -> None:
        """paused, stopped, unseen_from and inbox_ids come back as written."""
        checkpoint = Checkpoint(1, 2, 3, 0.5, "go", paused=True, stopped=True, unseen_from=41)
        message = UserMessage("hi", 1, inbox_ids=("m1", "m2"))
        for payload in (checkpoint, message):
            kind = str(eventlog._events.KIND_OF[type(payload)])
            assert payload == decode_payload(kind, encode_payload(payload), v=SCHEMA_VERSION)


class TestEventDict:
    """event_to_dict / event_from_dict, the CLI's --json form."""

    @settings(max_examples=60)
    @given(event=stored_events)
    def test_round_trip(self, event: Event) -> None:
        """An event survives conversion to a dict and back."""
        assert event == event_from_dict(event_to_dict(event))

    @settings(max_examples=60)
    @given(event=stored_events)
    def test_round_trip_through_json_text(self, event: Event) -> None:
        """An event survives JSON text, as the CLI prints and reads it."""
        assert event == event_from_dict(json.loads(json.dumps(event_to_dict(event))))

    def test_bad_payload_names_the_event(self) -> None:
        """A dict whose payload does not fit its kind raises CorruptEvent naming seq and id."""
        data = {
            "v": SCHEMA_VERSION,
            "seq": 7,
            "id": "abc",
            "app": "a",
            "user": "u",
            "session_id": "s",
            "kind": "user_message",
            "at": "2030-01-01T00:00:00+00:00",
            "payload": {"turn": "not a number"},
        }
        with pytest.raises(CorruptEvent) as caught:
            event_from_dict(data)
        assert ("a/u/s", 7, "abc") == (
            caught.value.session,
            caught.value.seq,
            caught.value.event_id,
        )


class TestEventIds:
    """Event ids: unique text, also between a process and a child it forks."""

    def test_ids_are_distinct_text(self) -> None:
        """Many ids, each text a text column stores as is, no two alike."""
        ids = [eventlog.new_event_id() for _ in range(10_000)]
        assert len(set(ids)) == len(ids)
        assert all(i.isascii() and i.isalnum() for i in ids)

    def test_a_forked_child_makes_other_ids_than_its_parent(self) -> None:
        """A child forked after its parent made ids never makes one of the parent's."""
        before = eventlog.new_event_id()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its next ids, to the parent
            os.close(read)
            os.write(write, " ".join(eventlog.new_event_id() for _ in range(100)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            child = set(pipe.read().split())
        os.waitpid(pid, 0)
        parent = {before, *(eventlog.new_event_id() for _ in range(100))}
        assert (100, set()) == (len(child), child & parent)


class TestSessionFinished:
    """SessionFinished: the error for control or inject of a session that has finished."""

    def test_names_the_session_and_the_refusal(self) -> None:
        """The message names the session and says control and inject are refused."""
        error = eventlog.SessionFinished("app/ops/a", "completed")
        assert ("app/ops/a", True) == (error.session, isinstance(error, EventLogError))
        assert "session app/ops/a has finished" in str(error)
        assert "refused" in str(error)
        assert "completed" in str(error)

    def test_detail_is_optional(self) -> None:
        """Without a detail the message still names the session."""
        assert "app/ops/a" in str(eventlog.SessionFinished("app/ops/a"))


class TestPublicFace:
    """The package's __all__: complete, importable, documented."""

    def test_all_names_exist(self) -> None:
        """Every name in __all__ is an attribute of the package."""
        assert [] == [name for name in eventlog.__all__ if not hasattr(eventlog, name)]

    def test_every_error_is_exported(self) -> None:
        """Every EventLogError subclass is in __all__."""
        errors = {
            name
            for name, value in vars(eventlog._errors).items()
            if inspect.isclass(value) and issubclass(value, EventLogError)
        }
        assert set() == errors - set(eventlog.__all__)

    def test_every_public_class_and_function_is_documented(self) -> None:
        """Every exported class and function has a docstring."""
        undocumented = [
            name
            for name in eventlog.__all__
            if (
                inspect.isclass(getattr(eventlog, name))
                or inspect.isfunction(getattr(eventlog, name))
            )
            and not inspect.getdoc(getattr(eventlog, name))
        ]
        assert [] == undocumented

"""Session keys: every key within MAX_KEY_LENGTH works on every store; a longer one is refused
before anything is written."""

from __future__ import annotations

import random
import secrets
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eventlog import (
    MAX_KEY_LENGTH,
    Checkpoint,
    Event,
    EventLog,
    EventLogError,
    InvalidSessionKey,
    LeaseHolder,
    MemoryEventLog,
    SessionKey,
    SessionRef,
    UserMessage,
)

pytestmark = pytest.mark.anyio

OK = SessionKey("app", "ops", "ok")
PARTS = ("app", "user", "session_id")

#: Characters a key meets at the edges: path characters, NUL and DLE (which PostgreSQL text
#: stores escaped, twice their length), accents, 4-byte characters, quotes.
EDGES = "/.\\\x00\x10é€😀\U0010ffff%'\" \n"

#: A key part within the limit: any text, or text of the edge characters (".." included).
parts = st.text(max_size=MAX_KEY_LENGTH) | st.text(alphabet=EDGES, max_size=MAX_KEY_LENGTH)

#: A key with every part within the limit.
keys = st.builds(SessionKey, parts, parts, parts)


def text_of_4_byte_characters(length: int, seed: int) -> str:
    """``length`` random characters of four UTF-8 bytes each (beyond U+FFFF): text that does
    not compress, the most bytes a character can take."""
    rnd = random.Random(seed)
    return "".join(chr(rnd.randrange(0x10000, 0x110000)) for _ in range(length))


#: The longest keys of each worst kind: incompressible 4-byte characters, NUL (stored as two
#: characters on PostgreSQL), DLE (likewise), and the path characters.
LONGEST = [
    SessionKey(*(text_of_4_byte_characters(MAX_KEY_LENGTH, seed) for seed in range(3))),
    SessionKey(*("\x00" * MAX_KEY_LENGTH,) * 3),
    SessionKey(*("\x10" * MAX_KEY_LENGTH,) * 3),
    SessionKey("../" * (MAX_KEY_LENGTH // 3), "/", ".." * (MAX_KEY_LENGTH // 2)),
]


def over_limit(key: SessionKey, part: str, extra: int) -> SessionKey:
    """``key`` with ``part`` ``extra`` characters longer than the limit."""
    return attrs.evolve(key, **{part: "😀" * (MAX_KEY_LENGTH + extra)})


def conversation(key: SessionKey) -> list[Event]:
    """A prompt and a checkpoint of session ``key``."""
    return [
        Event.create(key, UserMessage("hello", 1)),
        Event.create(key, Checkpoint(1, 10, 5, 0.25, "continue")),
    ]


async def round_trip(store: EventLog, key: SessionKey) -> None:
    """``key`` leased, appended to under the lease, read back, listed, and released."""
    holder = LeaseHolder("elsewhere", 4242, secrets.token_hex(4))
    lease = await store.acquire_lease(key, holder, ttl=30)
    assert key == lease.key
    events = conversation(key)
    seqs = await store.append(events, lease=lease)
    back = await store.read(key, after_seq=seqs[0] - 1)
    assert [(e.id, e.key) for e in events] == [(e.id, e.key) for e in back]
    latest = await store.latest_checkpoint(key)
    assert latest is not None and (key, seqs[-1]) == (latest.key, latest.seq)
    (listed,) = [summary for summary in await store.sessions() if summary.key == key]
    assert (seqs[-1], str(holder)) == (listed.checkpoint_seq, listed.holder)
    await store.release_lease(lease)
    (listed,) = [summary for summary in await store.sessions() if summary.key == key]
    assert listed.holder is None


class TestKeysWithinTheLimit:
    """Every key whose parts have at most MAX_KEY_LENGTH characters works on every store."""

    @settings(
        max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(key=keys)
    @example(key=SessionKey("", "", ""))
    @example(key=SessionKey("..", "/", "../../etc/passwd"))
    async def test_round_trips(self, store: EventLog, key: SessionKey) -> None:
        """A key of any text within the limit is leased, written, read, listed, released."""
        await round_trip(store, key)

    @pytest.mark.parametrize("key", LONGEST, ids=["4-byte", "nul", "dle", "path"])
    async def test_the_longest_keys_round_trip(self, store: EventLog, key: SessionKey) -> None:
        """Keys of MAX_KEY_LENGTH characters in each part, of the characters that take the
        most room, fit (PostgreSQL's index takes about 2,700 bytes of a row)."""
        await round_trip(store, key)


class TestKeysOverTheLimit:
    """A key with a part longer than MAX_KEY_LENGTH characters is refused up front."""

    @pytest.mark.parametrize("part", PARTS)
    async def test_the_error_names_the_part_and_the_limit(self, store: EventLog, part: str) -> None:
        """The refusal says which part is too long, how long it is, and the limit; it is a
        ValueError and an EventLogError."""
        key = over_limit(OK, part, 1)
        with pytest.raises(
            InvalidSessionKey, match=rf"{part}.* {MAX_KEY_LENGTH + 1} .* {MAX_KEY_LENGTH}"
        ) as caught:
            await store.append(conversation(key))
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value, EventLogError)
        assert part == caught.value.part

    @settings(
        max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(key=keys, part=st.sampled_from(PARTS), extra=st.integers(1, 3 * MAX_KEY_LENGTH))
    async def test_nothing_is_written(
        self, store: EventLog, key: SessionKey, part: str, extra: int
    ) -> None:
        """An append (even beside a good key's events), a lease and a fenced append of a key
        over the limit each raise InvalidSessionKey and write nothing."""
        bad = over_limit(key, part, extra)
        listed = await store.sessions()
        with pytest.raises(InvalidSessionKey):
            await store.append([*conversation(OK), *conversation(bad)])
        with pytest.raises(InvalidSessionKey):
            await store.acquire_lease(bad, LeaseHolder("elsewhere", 4242, "t"), ttl=30)
        lease = await store.acquire_lease(OK, LeaseHolder("elsewhere", 4242, "t"), ttl=30)
        with pytest.raises(InvalidSessionKey):
            await store.append(conversation(bad), lease=attrs.evolve(lease, key=bad))
        await store.release_lease(lease)
        assert listed == await store.sessions()
        assert ([], [], None) == (
            await store.read(OK),
            await store.read(bad),
            await store.latest_checkpoint(bad),
        )

    @pytest.mark.parametrize("part", PARTS)
    async def test_a_lone_surrogate_is_refused(self, store: EventLog, part: str) -> None:
        """Text no store can encode (a lone surrogate) is refused the same way."""
        key = attrs.evolve(OK, **{part: "a\ud800b"})
        with pytest.raises(InvalidSessionKey, match=part):
            await store.append(conversation(key))
        with pytest.raises(InvalidSessionKey, match=part):
            await store.acquire_lease(key, LeaseHolder("elsewhere", 4242, "t"), ttl=30)
        assert [] == await store.sessions()


class TestSessionRef:
    """A SessionRef (what users make) checks its key when it is made."""

    @pytest.mark.parametrize("part", PARTS)
    def test_a_key_over_the_limit_is_refused(self, part: str) -> None:
        """A part one character too long raises InvalidSessionKey naming it."""
        fields: dict[str, Any] = {"app": "app", "user": "ops", "session_id": "s"}
        fields[part] = "x" * (MAX_KEY_LENGTH + 1)
        with pytest.raises(InvalidSessionKey, match=part):
            SessionRef(MemoryEventLog(), **fields)

    def test_a_key_at_the_limit_is_taken(self) -> None:
        """Parts of exactly MAX_KEY_LENGTH characters make a ref of that key."""
        key = LONGEST[0]
        assert key == SessionRef(MemoryEventLog(), key.app, key.user, key.session_id).key

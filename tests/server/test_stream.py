"""The SSE stream of a session's events: exactly the log, resumable, live, across runs."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from datetime import timedelta
from typing import Any

import anyio
import attrs
import httpx
import pytest

from autonomous import Agent, resume_autonomous, start_autonomous
from autonomous.testing import FakeClock, ScriptedModel, done, reply
from eventlog import PostgresEventLog, SessionRef, SqliteEventLog

from ..autonomous.helpers import asleep
from ..support.litellm_http import wait_until
from .conftest import OPERATOR, VIEWER, completed_session, deferred_session, path_of, serving

pytestmark = pytest.mark.anyio


@attrs.frozen
class Frame:
    """One SSE message: its id, event name and JSON data."""

    id: int
    event: str
    data: dict[str, Any]


async def frames(response: httpx.Response) -> AsyncGenerator[Frame]:
    """The messages of an SSE response as they come (comments skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
            continue
        if "data" in fields:
            yield Frame(int(fields["id"]), fields["event"], json.loads(fields["data"]))
        fields = {}


async def take(
    client: httpx.AsyncClient, url: str, count: int, headers: Mapping[str, str]
) -> list[Frame]:
    """The first ``count`` messages of a stream, then the connection is cut."""
    got: list[Frame] = []
    with anyio.fail_after(10):
        async with client.stream("GET", url, headers=dict(headers)) as response:
            assert 200 == response.status_code
            assert response.headers["content-type"].startswith("text/event-stream")
            async for frame in frames(response):
                got.append(frame)
                if len(got) == count:
                    break
    return got


class TestStream:
    async def test_the_stream_is_the_log_then_resumes_without_gap_or_repeat(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        ref = await deferred_session(log, "monitor", "ops", "db-1")
        stored = await log.read(ref.key)
        stream = path_of(ref) + "/events/stream"
        async with serving(log, poll=0.05) as url:
            first = await take(client, url + stream, 3, OPERATOR)
            # Cut after three; meanwhile the session gets more events, through the API.
            for text in ("one", "two"):
                got = await client.post(
                    url + path_of(ref) + "/inject", headers=OPERATOR, json={"text": text}
                )
                assert 202 == got.status_code
            resumed_from = {**OPERATOR, "Last-Event-ID": str(first[-1].id)}
            rest = len(stored) - 3 + 2
            second = await take(client, url + stream, rest, resumed_from)
            third = await take(client, url + stream + f"?after={second[1].id}", 1, OPERATOR)
        everything = await log.read(ref.key)
        assert [e.seq for e in everything] == [f.id for f in first + second]
        assert [str(e.kind) for e in everything] == [f.event for f in first + second]
        assert [f.data["seq"] for f in first + second] == [f.id for f in first + second]
        assert second[-1].data["payload"]["text"] == "two"
        assert [second[2].id] == [f.id for f in third]

    async def test_the_stream_resumes_on_a_new_server_without_gap_or_repeat(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        ref = await deferred_session(log, "monitor", "ops", "db-1")
        stream = path_of(ref) + "/events/stream"
        async with serving(log) as url:
            first = await take(client, url + stream, 2, OPERATOR)
        async with serving(log, poll=0.05) as url:  # restarted (on another port)
            sent = await client.post(url + path_of(ref) + "/wake", headers=OPERATOR)
            assert 202 == sent.status_code
            rest = len(await log.read(ref.key)) - 2
            headers = {**OPERATOR, "Last-Event-ID": str(first[-1].id)}
            second = await take(client, url + stream, rest, headers)
        assert [e.seq for e in await log.read(ref.key)] == [f.id for f in first + second]

    async def test_a_viewers_stream_has_no_content(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        ref = await completed_session(log, "monitor", "ops", "disk-1")
        count = len(await log.read(ref.key))
        async with serving(log) as url:
            seen = await take(client, url + path_of(ref) + "/events/stream", count, VIEWER)
        assert "secret words" not in str([f.data for f in seen])
        assert count == len({f.id for f in seen})

    async def test_a_heartbeat_comment_every_interval_of_the_clock(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        ref = await completed_session(log, "monitor", "ops", "disk-1")
        count = len(await log.read(ref.key))
        clock = FakeClock()
        lines: list[str] = []
        async with serving(log, clock=clock, heartbeat=15, poll=3600) as url:
            with anyio.fail_after(10):
                stream_url = url + path_of(ref) + "/events/stream"
                async with client.stream("GET", stream_url, headers=OPERATOR) as response:
                    read = response.aiter_lines()
                    while lines.count("") < count:  # a blank line ends each message
                        lines.append(await anext(read))
                    await wait_until(lambda: clock.sleepers == 1)  # the stream waits
                    clock.advance(14)
                    await wait_until(lambda: clock.sleepers == 1)
                    clock.advance(1)
                    beat = await anext(read)
        assert not [line for line in lines if line.startswith(":")]
        assert ": heartbeat" == beat

    async def test_the_stream_follows_the_session_into_its_next_run(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        ref = await deferred_session(log, "monitor", "ops", "db-1")
        before = len(await log.read(ref.key))
        seen: list[Frame] = []
        async with serving(log, poll=0.05) as url:
            with anyio.fail_after(10):
                stream_url = url + path_of(ref) + "/events/stream"
                async with client.stream("GET", stream_url, headers=OPERATOR) as response:
                    stream = frames(response)
                    while len(seen) < before:
                        seen.append(await anext(stream))
                    woke = await client.post(url + path_of(ref) + "/wake", headers=OPERATOR)
                    assert 202 == woke.status_code  # due now: the resume does not wait
                    model = ScriptedModel([done("back again")])
                    await resume_autonomous(
                        lambda extra, sid: Agent(model, tools=extra, session=ref), ref
                    )
                    after = len(await log.read(ref.key))
                    while len(seen) < after:
                        seen.append(await anext(stream))
                    await stream.aclose()
        assert [e.seq for e in await log.read(ref.key)] == [f.id for f in seen]
        assert "checkpoint" == seen[-1].event
        assert "completed" == seen[-1].data["payload"]["stop_reason"]


class TestInjectReachesARun:
    async def test_an_inject_through_the_api_reaches_the_running_session(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        clock, model = FakeClock(), ScriptedModel(default=reply("working"))
        ref = SessionRef(log, "monitor", "ops", "live-1")

        async def before(turn: int) -> None:
            await clock.sleep_until(clock.now() + timedelta(seconds=60))  # a turn a minute

        async with (
            serving(log) as url,
            start_autonomous(
                lambda extra: Agent(model, tools=extra, session=ref),
                "go",
                before_turn=before,
                max_turns=0,
                control_poll=1,
                clock=clock,
            ) as handle,
        ):
            await asleep(clock, 3)  # the lease, the watch, and turn 1 before it begins
            got = await client.post(
                url + path_of(ref) + "/inject", headers=OPERATOR, json={"text": "from the api"}
            )
            assert 202 == got.status_code, got.text
            clock.advance(1)  # a poll reads it
            await asleep(clock, 3)
            clock.advance(59)  # turn 1 begins, with the message
            await wait_until(
                lambda: any("from the api" in str(m["content"]) for m in model.last_messages)
            )
            got = await client.post(url + path_of(ref) + "/stop", headers=OPERATOR)
            assert 202 == got.status_code, got.text
            clock.advance(1)
            with anyio.fail_after(5):
                await handle.wait()
        assert "stopped" == handle.status


@pytest.mark.postgres
class TestPostgres:
    async def test_the_stream_and_control_on_postgresql(
        self, pg_dsn: str, client: httpx.AsyncClient
    ) -> None:
        """An event appended through another server on the log reaches this one's stream by
        the log's LISTEN (no poll: it is an hour), and a control verb lands."""
        async with PostgresEventLog(pg_dsn) as log, PostgresEventLog(pg_dsn) as other:
            ref = await deferred_session(log, "monitor", "ops", "db-1")
            before = len(await log.read(ref.key))
            seen: list[Frame] = []
            async with serving(log, poll=3600) as url:
                with anyio.fail_after(10):
                    stream_url = url + path_of(ref) + "/events/stream"
                    async with client.stream("GET", stream_url, headers=OPERATOR) as response:
                        stream = frames(response)
                        while len(seen) < before:
                            seen.append(await anext(stream))
                        # Through a second server on the same log: only LISTEN tells this one.
                        async with serving(other) as other_url:
                            sent = await client.post(
                                other_url + path_of(ref) + "/inject",
                                headers=OPERATOR,
                                json={"text": "from elsewhere"},
                            )
                            assert 202 == sent.status_code, sent.text
                            seen.append(await anext(stream))
                        await stream.aclose()
                got = await client.post(url + path_of(ref) + "/stop", headers=OPERATOR)
                assert 202 == got.status_code, got.text
            everything = await log.read(ref.key)
            assert [e.seq for e in everything][:-1] == [f.id for f in seen]
            assert "from elsewhere" == seen[-1].data["payload"]["text"]
            assert ("control", "otto") == (str(everything[-1].kind), everything[-1].author)


class TestSlowClients:
    async def test_a_client_that_does_not_read_is_dropped_after_the_send_timeout(
        self, log: SqliteEventLog
    ) -> None:
        """The server never buffers for a client: it waits for each send, and gives up on
        one that takes longer than ``send_timeout`` (the stream, and its watch, end)."""
        from autonomous.server._stream import Changes, EventStream, session_frames

        ref = await completed_session(log, "monitor", "ops", "disk-1")
        clock = FakeClock()
        made = session_frames(
            log, ref.key, 0, content=True, changes=Changes(), clock=clock, heartbeat=15, poll=3600
        )
        response = EventStream(made, send_timeout=30, clock=clock)
        bodies: list[bytes] = []
        stuck, ended = anyio.Event(), anyio.Event()

        async def send(message: Any) -> None:
            if message["type"] == "http.response.body":
                bodies.append(message["body"])
                stuck.set()
                await anyio.sleep_forever()  # a client whose socket never drains

        async def receive() -> Any:
            await anyio.sleep_forever()

        async def serve() -> None:
            await response({"type": "http"}, receive, send)
            ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            with anyio.fail_after(5):
                await stuck.wait()
                clock.advance(29)
                await anyio.wait_all_tasks_blocked()
                assert not ended.is_set()
                clock.advance(1)
                await ended.wait()
        assert 1 == len(bodies)

    async def test_a_bad_last_event_id_is_422(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        ref = await completed_session(log, "monitor", "ops", "disk-1")
        async with serving(log) as url:
            got = await client.get(
                url + path_of(ref) + "/events/stream",
                headers={**OPERATOR, "Last-Event-ID": "seven"},
            )
        assert 422 == got.status_code
        assert {"code", "message", "details"} == set(got.json()["error"])

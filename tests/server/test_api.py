"""The control API on a real server: every route, the error envelope, the scope matrix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from autonomous import send_control
from eventlog import Control, EventKind, InboxQueued, SessionRef, SqliteEventLog, StoreUnavailable

from .conftest import ADMIN, LIMITED, OPERATOR, VIEWER, path_of, serving

pytestmark = pytest.mark.anyio

#: Every field DESIGN.md section 11 promises of a listed session.
SESSION_FIELDS = {
    "app", "user", "session_id", "status", "stop_reason", "turns", "input_tokens",
    "output_tokens", "cost_usd", "next_wake_at", "error",
}  # fmt: skip


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The envelope of an error answer, after checking its status and shape."""
    assert status == response.status_code, response.text
    body = response.json()
    assert {"error"} == set(body)
    assert {"code", "message", "details"} == set(body["error"])
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


#: The control verbs of DESIGN.md section 11.
CONTROL_VERBS = ("inject", "pause", "unpause", "stop", "wake", "resume")


class TestHealth:
    async def test_healthz_and_readyz_answer_without_a_token(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        async with serving(log) as url:
            assert 200 == (await client.get(f"{url}/healthz")).status_code
            assert 200 == (await client.get(f"{url}/readyz")).status_code

    async def test_a_store_that_does_not_answer_is_503_and_readyz_fails(
        self, log: SqliteEventLog, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        async def down(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable("the database is gone")

        async with serving(log) as url:
            monkeypatch.setattr(log, "read", down)
            monkeypatch.setattr(log, "sessions", down)
            assert 200 == (await client.get(f"{url}/healthz")).status_code
            _error(await client.get(f"{url}/readyz"), 503)
            error = _error(await client.get(f"{url}/v1/sessions", headers=VIEWER), 503)
            assert "unavailable" == error["code"]
            monkeypatch.undo()  # the store is back: so is the server, by itself
            assert 200 == (await client.get(f"{url}/readyz")).status_code

    async def test_an_unexpected_failure_is_500_in_the_envelope_without_its_text(
        self, log: SqliteEventLog, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("password=hunter2")

        monkeypatch.setattr(log, "sessions", broken)
        async with serving(log) as url:
            got = await client.get(f"{url}/v1/sessions", headers=VIEWER)
        assert "hunter2" not in _error(got, 500)["message"]


class TestOpenAPI:
    async def test_openapi_describes_every_route(
        self, log: SqliteEventLog, client: httpx.AsyncClient
    ) -> None:
        from autonomous.server._app import router

        routes = {
            (str(getattr(route, "path", "")), method.lower())
            for route in router.routes
            for method in getattr(route, "methods", ())
        }
        key = "/v1/sessions/{app}/{user}/{session_id}"
        promised = {
            ("/healthz", "get"),
            ("/readyz", "get"),
            ("/v1/sessions", "get"),
            (key, "get"),
            (f"{key}/events", "get"),
            (f"{key}/events/stream", "get"),
            *((f"{key}/{verb}", "post") for verb in CONTROL_VERBS),
        }
        assert promised <= routes
        async with serving(log) as url:
            spec = (await client.get(f"{url}/openapi.json")).json()
        described = {(path, method) for path, ops in spec["paths"].items() for method in ops}
        assert routes == described
        stream = spec["paths"][f"{key}/events/stream"]["get"]
        assert "text/event-stream" in stream["responses"]["200"]["content"]


class TestSessions:
    async def test_the_list_has_ls_fields_and_filters(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        async with serving(log) as url:
            body = (await client.get(f"{url}/v1/sessions", headers=OPERATOR)).json()
            assert None is body["next_cursor"]
            rows = {(r["app"], r["user"], r["session_id"]): r for r in body["sessions"]}
            assert {(s.app, s.user, s.session_id) for s in sessions.values()} == set(rows)
            for row in rows.values():
                assert SESSION_FIELDS <= set(row)
            done = rows[("monitor", "ops", "disk-1")]
            summary = {s.key: s for s in await log.sessions()}[sessions["done"].key]
            assert ("completed", "completed", summary.turns) == (
                done["status"],
                done["stop_reason"],
                done["turns"],
            )
            assert done["turns"] >= 1 and done["input_tokens"] == summary.input_tokens
            deferred = rows[("other", "ops", "db-1")]
            assert ("deferred", None) == (deferred["status"], deferred["error"])
            assert deferred["next_wake_at"] is not None

            async def listed(query: str) -> set[str]:
                got = await client.get(f"{url}/v1/sessions?{query}", headers=VIEWER)
                assert 200 == got.status_code, got.text
                return {r["session_id"] for r in got.json()["sessions"]}

            assert {"db-1"} == await listed("status=deferred")
            assert {"db-1", "disk-1", "a/b %2F?#"} == await listed("status=deferred,completed")
            assert {"disk-1", "a/b %2F?#"} == await listed("app=monitor")
            assert {"a/b %2F?#"} == await listed("user=é ü")
            error = _error(await client.get(f"{url}/v1/sessions?status=nap", headers=VIEWER), 422)
            assert "nap" in error["message"]

    async def test_pages_follow_the_cursor_without_gap_or_repeat(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        async with serving(log) as url:
            seen: list[str] = []
            cursor: str | None = None
            pages = 0
            while True:
                query = "limit=1" + (f"&cursor={cursor}" if cursor else "")
                body = (await client.get(f"{url}/v1/sessions?{query}", headers=VIEWER)).json()
                seen += [r["session_id"] for r in body["sessions"]]
                pages += 1
                cursor = body["next_cursor"]
                if cursor is None:
                    break
            whole = (await client.get(f"{url}/v1/sessions", headers=VIEWER)).json()
            assert [r["session_id"] for r in whole["sessions"]] == seen
            assert 3 == pages == len(seen)
            _error(await client.get(f"{url}/v1/sessions?cursor=nonsense", headers=VIEWER), 400)
            _error(await client.get(f"{url}/v1/sessions?limit=0", headers=VIEWER), 422)

    async def test_one_session_by_its_encoded_key_with_budgets_and_spec(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        async with serving(log) as url:
            for ref in sessions.values():
                got = await client.get(url + path_of(ref), headers=OPERATOR)
                assert 200 == got.status_code, got.text
                body = got.json()
                assert (ref.app, ref.user, ref.session_id) == (
                    body["app"],
                    body["user"],
                    body["session_id"],
                )
                assert SESSION_FIELDS | {"budgets", "budgets_left", "holder", "spec"} <= set(body)
            done = (await client.get(url + path_of(sessions["done"]), headers=OPERATOR)).json()
            assert "all fine" == done["done_detail"]
            shown = (await client.get(url + path_of(sessions["done"]), headers=VIEWER)).json()
            assert "done_detail" not in shown  # the words of the run are content

    @pytest.mark.parametrize(
        "path",
        [
            "/v1/sessions/monitor/ops/nope",
            "/v1/sessions/monitor/ops/" + "x" * 300,
            "/v1/sessions/monitor/ops/%00",
            "/v1/sessions/monitor/ops/%ED%A0%80",  # a lone surrogate's bytes: not UTF-8
            "/v1/sessions/monitor/ops/..%2F..%2Fetc",
            "/v1/sessions/monitor/ops/nope/events",
            "/v1/sessions/monitor/ops/nope/events/stream",
        ],
    )
    async def test_an_unknown_or_invalid_key_is_404(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
        path: str,
    ) -> None:
        async with serving(log) as url:
            _error(await client.get(url + path, headers=OPERATOR), 404)
            _error(await client.post(url + path + "/stop", headers=OPERATOR), 404)


class TestEvents:
    async def test_events_after_a_seq_match_the_log(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        ref = sessions["done"]
        stored = await log.read(ref.key)
        async with serving(log) as url:
            got = await client.get(url + path_of(ref) + "/events", headers=OPERATOR)
            events = got.json()["events"]
            assert [e.seq for e in stored] == [e["seq"] for e in events]
            for event in events:
                assert {"seq", "kind", "author", "time", "payload"} <= set(event)
            middle = stored[2].seq
            got = await client.get(
                url + path_of(ref) + f"/events?after={middle}&limit=2", headers=OPERATOR
            )
            assert [e.seq for e in stored if e.seq > middle][:2] == [
                e["seq"] for e in got.json()["events"]
            ]
            _error(await client.get(url + path_of(ref) + "/events?after=x", headers=VIEWER), 422)

    async def test_a_viewer_gets_events_without_their_content(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        ref = sessions["done"]
        async with serving(log) as url:
            full = (await client.get(url + path_of(ref) + "/events", headers=OPERATOR)).json()
            bare = (await client.get(url + path_of(ref) + "/events", headers=VIEWER)).json()
        assert "secret words" in str(full)
        assert "secret words" not in str(bare)
        assert "noted" not in str(bare)
        strip = ("seq", "kind", "author", "time")
        assert [{k: e[k] for k in strip} for e in full["events"]] == [
            {k: e[k] for k in strip} for e in bare["events"]
        ]
        kinds = {e["kind"] for e in bare["events"]}
        assert {"user_message", "assistant_message", "tool_result", "checkpoint"} <= kinds
        calls = [e for e in bare["events"] if e["payload"].get("tool_calls")]
        assert calls and all(
            "arguments" not in c for e in calls for c in e["payload"]["tool_calls"]
        )


class TestControl:
    @pytest.mark.parametrize("verb", ["pause", "unpause", "wake", "stop"])
    async def test_a_control_verb_is_appended_by_its_principal(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
        verb: str,
    ) -> None:
        ref = sessions["deferred"]
        async with serving(log) as url:
            got = await client.post(url + path_of(ref) + f"/{verb}", headers=OPERATOR)
        assert 202 == got.status_code, got.text
        (event,) = await log.read(ref.key, after_seq=got.json()["seq"] - 1)
        assert got.json() == {"seq": event.seq}
        assert isinstance(event.payload, Control)
        action = {"unpause": "resume"}.get(verb, verb)
        assert (action, "otto") == (event.payload.action, event.author)
        assert event.payload.caller is not None and "otto" == event.payload.caller.identity

    async def test_a_principal_named_like_a_runs_handle_is_still_obeyed(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        """A run ignores control events its own handle wrote (author ``handle...``): a
        principal of that name is recorded as the API's, so a run still obeys its stop."""
        ref = sessions["deferred"]
        async with serving(log) as url:
            got = await client.post(
                url + path_of(ref) + "/stop", headers={"Authorization": "Bearer handle-secret"}
            )
        assert 202 == got.status_code, got.text
        (event,) = await log.read(ref.key, after_seq=got.json()["seq"] - 1)
        assert "api:handle" == event.author

    async def test_inject_is_durable_with_its_caller_and_wake(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        ref = sessions["deferred"]
        async with serving(log) as url:
            got = await client.post(
                url + path_of(ref) + "/inject",
                headers=OPERATOR,
                json={"text": "look at db-2", "wake": True},
            )
        assert 202 == got.status_code, got.text
        queued, woke = await log.read(ref.key, after_seq=got.json()["seq"] - 1)
        assert isinstance(queued.payload, InboxQueued)
        assert ("look at db-2", "otto") == (queued.payload.text, queued.author)
        assert queued.payload.caller is not None
        assert ("otto", "operator") == (
            queued.payload.caller.identity,
            queued.payload.caller.labels["scope"],
        )
        assert isinstance(woke.payload, Control) and "wake" == woke.payload.action
        summary = {s.key: s for s in await log.sessions()}[ref.key]
        assert summary.next_wake_at is not None and summary.next_wake_at <= woke.at

    async def test_resume_unpauses_and_wakes_but_a_stopped_session_is_409(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        ref = sessions["deferred"]
        async with serving(log) as url:
            await client.post(url + path_of(ref) + "/pause", headers=OPERATOR)
            got = await client.post(url + path_of(ref) + "/resume", headers=OPERATOR, json={})
            assert 202 == got.status_code, got.text
            summary = {s.key: s for s in await log.sessions()}[ref.key]
            assert not summary.paused
            await send_control(log, ref.key, "stop")
            _error(await client.post(url + path_of(ref) + "/resume", headers=OPERATOR), 409)
            _error(
                await client.post(
                    url + path_of(ref) + "/resume", headers=OPERATOR, json={"force": True}
                ),
                409,
            )

    @pytest.mark.parametrize("verb", ["inject", "pause", "unpause", "stop", "wake", "resume"])
    async def test_control_of_a_finished_session_is_409(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
        verb: str,
    ) -> None:
        before = await log.read(sessions["done"].key)
        async with serving(log) as url:
            body = {"text": "hello"} if verb == "inject" else None
            got = await client.post(
                url + path_of(sessions["done"]) + f"/{verb}", headers=OPERATOR, json=body
            )
        _error(got, 409)
        assert before == await log.read(sessions["done"].key)


class TestErrors:
    async def test_every_error_has_the_envelope(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        inject = path_of(sessions["deferred"]) + "/inject"
        async with serving(log, body_limit=1024) as url:
            _error(await client.get(f"{url}/v2/nothing", headers=OPERATOR), 404)
            _error(await client.get(f"{url}/nothing"), 404)
            _error(await client.delete(f"{url}/v1/sessions", headers=OPERATOR), 405)
            bad = await client.post(
                url + inject,
                headers={**OPERATOR, "Content-Type": "application/json"},
                content=b"{not json",
            )
            assert "JSON" in _error(bad, 422)["message"]
            unknown = await client.post(
                url + inject, headers=OPERATOR, json={"text": "hi", "volume": 11}
            )
            assert "volume" in _error(unknown, 422)["message"]
            missing = await client.post(url + inject, headers=OPERATOR, json={})
            assert "text" in _error(missing, 422)["message"]
            blank = await client.post(url + inject, headers=OPERATOR, json={"text": "  "})
            _error(blank, 422)
            huge = await client.post(url + inject, headers=OPERATOR, json={"text": "x" * 5000})
            _error(huge, 413)

            async def chunks() -> Any:
                for _ in range(10):
                    yield b" " * 500

            chunked = await client.post(url + inject, headers=OPERATOR, content=chunks())
            _error(chunked, 413)
        assert not [
            e for e in await log.read(sessions["deferred"].key) if e.kind is EventKind.INBOX_QUEUED
        ]


#: Each route, as (method, path under the session or None for the list, body).
READS: list[tuple[str, str, Any]] = [
    ("GET", "", None),
    ("GET", "/events", None),
]
CONTROLS: list[tuple[str, str, Any]] = [
    ("POST", "/inject", {"text": "hi"}),
    ("POST", "/pause", None),
    ("POST", "/unpause", None),
    ("POST", "/stop", None),
    ("POST", "/wake", None),
    ("POST", "/resume", None),
]


class TestScopes:
    @pytest.mark.parametrize("route", READS + CONTROLS, ids=lambda r: r[1] or "session")
    @pytest.mark.parametrize(
        ("who", "read", "control"),
        [
            ({}, 401, 401),
            ({"Authorization": "Bearer wrong"}, 401, 401),
            ({"Authorization": "Basic b3R0bzpvcGVyYXRvci1zZWNyZXQ="}, 401, 401),
            (VIEWER, 200, 403),
            (OPERATOR, 200, 202),
            (ADMIN, 200, 202),
            (LIMITED, 404, 404),
        ],
        ids=["none", "bad", "basic", "viewer", "operator", "admin", "other-app"],
    )
    async def test_the_scope_matrix(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
        route: tuple[str, str, Any],
        who: dict[str, str],
        read: int,
        control: int,
    ) -> None:
        method, tail, body = route
        expected = read if method == "GET" else control
        # An app-limited principal (of app "other"): another app's session is unknown to it.
        ref = sessions["done"] if who is LIMITED else sessions["deferred"]
        async with serving(log) as url:
            got = await client.request(method, url + path_of(ref) + tail, headers=who, json=body)
            assert expected == got.status_code, got.text
            if expected >= 400:
                _error(got, expected)
            if expected == 401:
                assert "Bearer" in got.headers["www-authenticate"]
            listed = await client.get(f"{url}/v1/sessions", headers=who)
            assert (read if read != 404 else 200) == listed.status_code
            if who is LIMITED:
                assert {"other"} == {r["app"] for r in listed.json()["sessions"]}

    async def test_the_limited_principal_reaches_its_own_apps_sessions(
        self,
        log: SqliteEventLog,
        sessions: Mapping[str, SessionRef],
        client: httpx.AsyncClient,
    ) -> None:
        ref = sessions["deferred"]
        async with serving(log) as url:
            assert 200 == (await client.get(url + path_of(ref), headers=LIMITED)).status_code
            got = await client.post(url + path_of(ref) + "/wake", headers=LIMITED)
            assert 202 == got.status_code


class TestMounted:
    async def test_the_app_works_mounted_under_a_prefix_of_another(
        self, log: SqliteEventLog, sessions: Mapping[str, SessionRef]
    ) -> None:
        """Embedders mount it in their own app: the session routes still find their key, a
        segment holding ``/`` included."""
        from starlette.applications import Starlette
        from starlette.routing import Mount

        from autonomous.server import create_app

        from .conftest import dict_auth

        outer = Starlette(routes=[Mount("/api", app=create_app(log, auth=dict_auth))])
        transport = httpx.ASGITransport(app=outer)
        async with httpx.AsyncClient(transport=transport, base_url="http://embedder") as client:
            for ref in sessions.values():
                got = await client.get("/api" + path_of(ref) + "/events", headers=VIEWER)
                assert 200 == got.status_code, got.text
                assert len(await log.read(ref.key)) == len(got.json()["events"])
            listed = await client.get("/api/v1/sessions", headers=VIEWER)
            assert 3 == len(listed.json()["sessions"])


class TestDefaultAuth:
    """``create_app(log)`` without ``auth``: the log's own tokens say who a request is."""

    async def test_the_log_s_tokens_are_the_default(
        self, log: SqliteEventLog, sessions: Mapping[str, SessionRef], client: httpx.AsyncClient
    ) -> None:
        from datetime import UTC, datetime

        from autonomous.server._tokens import digest, new_secret
        from eventlog import TokenRecord

        secret = new_secret()
        record = TokenRecord("vic", "viewer", digest(secret), datetime.now(UTC), app="monitor")
        await log.create_token(record)
        async with serving(log, auth=None) as base:
            path = base + path_of(sessions["done"])
            mine = await client.get(path, headers={"Authorization": f"Bearer {secret}"})
            other = await client.get(
                base + path_of(sessions["deferred"]),
                headers={"Authorization": f"Bearer {secret}"},
            )
            control = await client.post(
                path + "/stop", headers={"Authorization": f"Bearer {secret}"}
            )
            anonymous = await client.get(path)
            await log.revoke_token("vic")
            revoked = await client.get(path, headers={"Authorization": f"Bearer {secret}"})
        statuses = [r.status_code for r in (mine, other, control, anonymous, revoked)]
        assert [200, 404, 403, 401, 401] == statuses

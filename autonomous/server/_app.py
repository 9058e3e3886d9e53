"""The API's routes over one event log: sessions, their events and live stream, control verbs.

The API is a view of the log, never a second source of truth: every state it shows is folded
from the log by the code ``autonomous ls`` and ``show`` use, and every control request is an
event appended (and committed) by the library's own :func:`~autonomous.send_inject` and
:func:`~autonomous.send_control` paths before the answer (202 with its seq).

Who may do what: every route but the health checks needs a principal (401 without one); a
viewer reads states and events without content, an operator also reads content and controls
(403 below that); a principal limited to an app finds other apps' sessions unknown (404).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

import anyio
import attrs
import pydantic
from fastapi import APIRouter, Body, Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from eventlog import EventLog, SessionKey, utcnow
from permissions import Caller
from scheduler import Clock, SystemClock

from .._cli._view import STATUSES, views_of
from .._control._control_requests import HANDLE_AUTHOR, ControlAction
from .._control._remote import append_control, append_inject
from .._control._session_state import session_state
from ._auth import Authenticate, Principal, Scope
from ._errors import ApiError, BodyLimit, install_error_handlers
from ._stream import Changes, EventStream, session_frames
from ._tokens import token_auth
from ._views import event_dict, session_detail, session_dict

#: The largest request body taken (bytes): a control request is a few hundred.
BODY_LIMIT = 64 * 1024
#: Where a session's routes begin; its key's three segments follow.
_SESSIONS = "/v1/sessions/"
#: The ASGI scope entry the session key of a request goes in (see :class:`_SessionKeys`).
_KEY = "autonomous.session_key"


class InjectBody(pydantic.BaseModel):
    """``POST .../inject``: the message, and whether to end a scheduled sleep too."""

    model_config = pydantic.ConfigDict(extra="forbid")
    text: str
    wake: bool = False


class ResumeBody(pydantic.BaseModel):
    """``POST .../resume``: ``force`` for a session that was stopped on purpose."""

    model_config = pydantic.ConfigDict(extra="forbid")
    force: bool = False


class Accepted(pydantic.BaseModel):
    """A control request's answer: the seq of the event that records it (durable)."""

    seq: int


class _SessionKeys:
    """ASGI middleware: read a session route's key from the raw path, each segment
    percent-decoded on its own, so that a part holding ``/`` (sent as ``%2F``) stays one part.

    The key goes in the scope (:data:`_KEY`; None for one that is not UTF-8, which names no
    session); the path the router matches gets a placeholder for each part.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") or scope.get("path", "").encode()
        raw = raw.split(b"?", 1)[0]
        root = scope.get("root_path", "")  # where the app is mounted, if it is
        if root and raw.startswith(root.encode()):
            raw = raw[len(root.encode()) :]
        prefix = _SESSIONS.encode()
        if scope["type"] == "http" and raw.startswith(prefix):
            segments = raw[len(prefix) :].split(b"/")
            if len(segments) >= 3:
                key: SessionKey | None
                try:
                    parts = [unquote_to_bytes(s).decode() for s in segments[:3]]
                    key = SessionKey(*parts)
                except UnicodeDecodeError:
                    key = None
                rest = [unquote_to_bytes(s).decode(errors="replace") for s in segments[3:]]
                scope = dict(scope)
                scope[_KEY] = key
                scope["path"] = root + _SESSIONS + "/".join(["-", "-", "-", *rest])
        await self.app(scope, receive, send)


def _caller(principal: Principal) -> Caller:
    """The permission rules' caller for a principal's inject: its name, scope and app."""
    labels = {"scope": principal.scope.value, "via": "api"}
    if principal.app is not None:
        labels["app"] = principal.app
    return Caller(identity=principal.name, labels=labels)


def _author(principal: Principal) -> str:
    """The author of the events a principal appends: its name (one that a run would take for
    its own handle's is marked as the API's, so that the run still obeys it)."""
    name = principal.name
    return f"api:{name}" if not name or name.startswith(HANDLE_AUTHOR) else name


def _cursor(key: SessionKey) -> str:
    """The opaque cursor of the page that follows ``key``."""
    text = json.dumps([key.app, key.user, key.session_id], ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode()


def _after_cursor(cursor: str) -> SessionKey:
    """The session a cursor follows, or 400."""
    try:
        app, user, session_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return SessionKey(str(app), str(user), str(session_id))
    except (ValueError, TypeError, binascii.Error):
        raise ApiError(400, f"not a cursor of this API: {cursor!r}", code="bad_cursor") from None


def _statuses(text: str | None) -> set[str]:
    """The ``status`` filter: one status or a comma list of the ones ``ls`` shows (else 422)."""
    if text is None:
        return set()
    words = {word.strip() for word in text.split(",") if word.strip()}
    unknown = sorted(words - set(STATUSES))
    if unknown or not words:
        raise ApiError(
            422,
            f"unknown status {', '.join(unknown) or text!r}; one of {', '.join(STATUSES)}",
            details={"field": "status"},
        )
    return words


async def _principal(request: Request) -> Principal:
    """Who the request is, by the app's hook (401 when it proves nothing)."""
    found = await _state(request).authenticate(request)
    if found is None:
        raise ApiError(401, "a valid bearer token is needed (Authorization: Bearer ...)")
    return found


def _needs(scope: Scope) -> Callable[[Request], Awaitable[Principal]]:
    """The dependency of a route that needs ``scope`` (403 for a principal below it)."""

    async def allowed(request: Request) -> Principal:
        found = await _principal(request)
        if not found.may(scope):
            raise ApiError(403, f"{found.name!r} may not do this: it needs scope {scope}")
        return found

    return allowed


#: A route's principal, who must be at least a viewer (reads) or an operator (control).
Viewer = Annotated[Principal, Depends(_needs(Scope.VIEWER))]
Operator = Annotated[Principal, Depends(_needs(Scope.OPERATOR))]


@attrs.frozen
class _State:
    """What the routes of one app work with (``app.state.api``)."""

    log: EventLog
    authenticate: Authenticate
    changes: Changes
    clock: Clock
    heartbeat: float
    poll: float
    send_timeout: float


def _state(request: Request) -> _State:
    """The state of the app serving ``request``."""
    state: _State = request.app.state.api
    return state


def create_app(
    log: EventLog,
    *,
    auth: Authenticate | None = None,
    heartbeat: float = 15.0,
    poll: float = 0.5,
    clock: Clock | None = None,
    body_limit: int = BODY_LIMIT,
    send_timeout: float = 30.0,
) -> FastAPI:
    """The HTTP control API over ``log``, as a FastAPI (ASGI) app to serve or mount.

    ``auth`` says who each request is (see :data:`~autonomous.server.Authenticate`); None
    means the log's tokens. Streams send a heartbeat comment every ``heartbeat`` seconds of
    ``clock`` and look for new events every ``poll`` seconds when the store does not signal
    them; a stream client that does not take a message within ``send_timeout`` seconds is
    dropped. A request body over ``body_limit`` bytes is refused (413).
    """
    api = FastAPI(
        title="autonomous control API",
        summary="Sessions of an event log: their state, events, live stream and control.",
        version="1",
    )
    api.state.api = _State(
        log=log,
        authenticate=auth if auth is not None else token_auth(log),
        changes=Changes(),
        clock=clock if clock is not None else SystemClock(),
        heartbeat=heartbeat,
        poll=poll,
        send_timeout=send_timeout,
    )
    install_error_handlers(api)
    api.add_middleware(BodyLimit, limit=body_limit)
    api.add_middleware(_SessionKeys)
    api.include_router(router)
    return api


#: The API's routes (one set, for every app create_app makes; each finds its log in its app).
router = APIRouter()


async def _session_of(request: Request, who: Principal) -> SessionKey:
    """The request's session, when it exists and ``who`` may see it (else 404)."""
    log = _state(request).log
    if _KEY in request.scope:
        key = request.scope[_KEY]
    else:  # a server that hands on no raw path: the router's decoding
        params = request.path_params
        key = SessionKey(params["app"], params["user"], params["session_id"])
    if not isinstance(key, SessionKey) or not who.sees(key.app):
        raise ApiError(404, "no such session")
    if not await log.read(key, limit=1):
        raise ApiError(404, f"no such session: {key}")
    return key


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, str]:
    """The server is up (it says nothing of the store)."""
    return {"status": "ok"}


@router.get("/readyz", tags=["health"])
async def readyz(request: Request) -> JSONResponse:
    """The store answers (200), or not (503)."""
    log = _state(request).log
    try:
        with anyio.fail_after(5):
            await log.read(SessionKey("-", "-", "readyz"), limit=1)
    except Exception as exc:  # any failure to answer is "not ready"; said in the body
        body = {"code": "unavailable", "message": f"the event log does not answer: {exc}"}
        return JSONResponse({"error": {**body, "details": None}}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/v1/sessions", tags=["sessions"])
async def list_sessions(
    request: Request,
    who: Viewer,
    *,
    status: str | None = None,
    app: str | None = None,
    user: str | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    """The sessions of the log, newest first, as ``autonomous ls --json`` lists them,
    filtered by status (one or a comma list), app and user; a page of ``limit``."""
    wanted = _statuses(status)
    log = _state(request).log
    summaries = [
        s
        for s in await log.sessions()
        if who.sees(s.key.app)
        and (app is None or s.key.app == app)
        and (user is None or s.key.user == user)
    ]
    if cursor is not None:
        after = _after_cursor(cursor)
        keys = [s.key for s in summaries]
        if after not in keys:
            raise ApiError(400, "the cursor's session is no longer listed", code="bad_cursor")
        summaries = summaries[keys.index(after) + 1 :]
    views = []
    for view in await views_of(log, summaries, utcnow()):
        if not wanted or view.status in wanted:
            views.append(view)
            if len(views) > limit:
                break
    page, more = views[:limit], len(views) > limit
    content = who.may(Scope.OPERATOR)
    return {
        "sessions": [session_dict(v, content=content) for v in page],
        "next_cursor": _cursor(page[-1].summary.key) if more else None,
    }


@router.get("/v1/sessions/{app}/{user}/{session_id}", tags=["sessions"])
async def get_session(
    request: Request, who: Viewer, *, app: str, user: str, session_id: str
) -> dict[str, Any]:
    """One session: status, stop reason, totals, budgets and what is left of each, next
    wake, holder, last error, and the spec it runs."""
    key = await _session_of(request, who)
    return await session_detail(_state(request).log, key, utcnow(), content=who.may(Scope.OPERATOR))


@router.get("/v1/sessions/{app}/{user}/{session_id}/events", tags=["events"])
async def list_events(
    request: Request,
    who: Viewer,
    *,
    app: str,
    user: str,
    session_id: str,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """The session's events with a seq after ``after``, oldest first, ``limit`` at most
    (without content for a viewer)."""
    key = await _session_of(request, who)
    content = who.may(Scope.OPERATOR)
    events = await _state(request).log.read(key, after_seq=after, limit=limit)
    return {"events": [event_dict(e, content=content) for e in events]}


@router.get(
    "/v1/sessions/{app}/{user}/{session_id}/events/stream",
    tags=["events"],
    status_code=200,
    response_class=EventStream,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream_events(
    request: Request,
    who: Viewer,
    *,
    app: str,
    user: str,
    session_id: str,
    after: Annotated[int | None, Query(ge=0)] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventStream:
    """Server-Sent Events: each event after ``Last-Event-ID`` (or ``after``) as it comes,
    ``id:`` its seq and ``event:`` its kind, across the session's runs and wakes."""
    key = await _session_of(request, who)
    start = after or 0
    if last_event_id is not None and last_event_id.strip():
        if not last_event_id.strip().isdigit():
            raise ApiError(422, f"Last-Event-ID is not a seq: {last_event_id!r}")
        start = int(last_event_id.strip())
    state = _state(request)
    frames = session_frames(
        state.log,
        key,
        start,
        content=who.may(Scope.OPERATOR),
        changes=state.changes,
        clock=state.clock,
        heartbeat=state.heartbeat,
        poll=state.poll,
    )
    return EventStream(frames, send_timeout=state.send_timeout, clock=state.clock)


async def _control(request: Request, who: Principal, action: ControlAction) -> Accepted:
    """Append the control request ``action`` of ``who`` for the request's session."""
    key = await _session_of(request, who)
    state = _state(request)
    seq = await append_control(
        state.log, key, action.value, caller=_caller(who), via="api", author=_author(who)
    )
    state.changes.notify()
    return Accepted(seq=seq)


@router.post("/v1/sessions/{app}/{user}/{session_id}/inject", status_code=202, tags=["control"])
async def inject(
    request: Request,
    who: Operator,
    *,
    app: str,
    user: str,
    session_id: str,
    body: InjectBody,
) -> Accepted:
    """Queue a message in the session's inbox (``wake``: also end a scheduled sleep); the
    seq of the message's event, durable."""
    key = await _session_of(request, who)
    state = _state(request)
    _, seqs = await append_inject(
        state.log,
        key,
        body.text,
        caller=_caller(who),
        via="api",
        wake=body.wake,
        author=_author(who),
    )
    state.changes.notify()
    return Accepted(seq=seqs[0])


@router.post("/v1/sessions/{app}/{user}/{session_id}/pause", status_code=202, tags=["control"])
async def pause(
    request: Request, who: Operator, *, app: str, user: str, session_id: str
) -> Accepted:
    """Ask the session to park before its next turn (a session not running: at its next
    resume)."""
    return await _control(request, who, ControlAction.PAUSE)


@router.post("/v1/sessions/{app}/{user}/{session_id}/unpause", status_code=202, tags=["control"])
async def unpause(
    request: Request, who: Operator, *, app: str, user: str, session_id: str
) -> Accepted:
    """Let a paused session go on."""
    return await _control(request, who, ControlAction.RESUME)


@router.post("/v1/sessions/{app}/{user}/{session_id}/stop", status_code=202, tags=["control"])
async def stop(
    request: Request, who: Operator, *, app: str, user: str, session_id: str
) -> Accepted:
    """Stop the session: a running one ends at its next step; the stop sticks."""
    return await _control(request, who, ControlAction.STOP)


@router.post("/v1/sessions/{app}/{user}/{session_id}/wake", status_code=202, tags=["control"])
async def wake(
    request: Request, who: Operator, *, app: str, user: str, session_id: str
) -> Accepted:
    """End the session's wait for its wake time (a sleeping run goes on at once, a
    deferred session is due now)."""
    return await _control(request, who, ControlAction.WAKE)


@router.post("/v1/sessions/{app}/{user}/{session_id}/resume", status_code=202, tags=["control"])
async def resume(
    request: Request,
    who: Operator,
    *,
    app: str,
    user: str,
    session_id: str,
    body: Annotated[ResumeBody | None, Body()] = None,
) -> Accepted:
    """Make the session go on: unpaused and due now (a daemon runs it). A session that
    was stopped on purpose is 409."""
    key = await _session_of(request, who)
    if (await session_state(_state(request).log, key)).stopped:
        force = body is not None and body.force
        raise ApiError(
            409,
            f"session {key} was stopped; "
            + (
                "a forced resume through the API is not supported yet: run"
                f" `autonomous resume {key} --force`"
                if force
                else "resume it with force"
            ),
            code="session_stopped",
        )
    await _control(request, who, ControlAction.RESUME)
    return await _control(request, who, ControlAction.WAKE)

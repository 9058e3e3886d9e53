"""One error envelope for every error the API answers: ``{"error": {code, message, details}}``.

Every way a request can fail ends here: the API's own refusals (:class:`ApiError`), FastAPI's
validation errors (bad JSON, an unknown or missing field: 422, naming it), Starlette's
(an unknown route: 404, a method a route lacks: 405), a body over the limit (413, by
:class:`BodyLimit`), and the event log's errors (a store that does not answer: 503), so that
a client reads one shape whatever went wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from eventlog import EventLogError, InvalidSessionKey, SessionFinished, StoreUnavailable

from .._errors import ConfigurationError

#: The code each status is given when nothing more precise is known.
CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "invalid",
    500: "internal",
    503: "unavailable",
}


class ApiError(Exception):
    """A refusal the API answers with ``status`` and the envelope of ``code``, ``message`` and
    ``details``."""

    def __init__(
        self, status: int, message: str, *, code: str | None = None, details: Any = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or CODES.get(status, "error")
        self.message = message
        self.details = details


def envelope(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The JSON response of an error."""
    body = {"error": {"code": code, "message": message, "details": jsonable_encoder(details)}}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _field(loc: Sequence[Any]) -> str:
    """``body.text`` for a pydantic location such as ``("body", "text")``."""
    return ".".join(str(part) for part in loc)


def _invalid_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line naming each field a validation error is about, and what is wrong with it."""
    parts = []
    for error in errors:
        where = _field(error.get("loc", ()))
        if error.get("type") == "json_invalid":
            parts.append(f"the body is not valid JSON ({error.get('msg', '')})")
        elif error.get("type") == "extra_forbidden":
            parts.append(f"unknown field {where}")
        else:
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error ``app`` raises (its own, FastAPI's, Starlette's, the log's) with the
    envelope."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return envelope(exc.status, exc.code, exc.message, exc.details, headers)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"loc": list(e.get("loc", ())), "type": e.get("type"), "msg": e.get("msg")}
            for e in exc.errors()
        ]
        return envelope(422, "invalid", _invalid_message(errors), errors)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        return envelope(exc.status_code, code, message, None, exc.headers)

    async def finished(request: Request, exc: Exception) -> JSONResponse:
        return envelope(409, "session_finished", str(exc))

    async def invalid_key(request: Request, exc: Exception) -> JSONResponse:
        # A key no store can hold names no session: as unknown as any other.
        return envelope(404, "not_found", f"no such session ({exc})")

    async def configuration(request: Request, exc: Exception) -> JSONResponse:
        return envelope(422, "invalid", str(exc))

    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        return envelope(503, "unavailable", f"the event log does not answer: {exc}")

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        return envelope(500, "store_error", f"the event log failed: {type(exc).__name__}")

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        # The type only: an exception's text may hold what a caller must not see.
        return envelope(500, "internal", f"internal error ({type(exc).__name__})")

    app.add_exception_handler(Exception, internal)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(SessionFinished, finished)
    app.add_exception_handler(InvalidSessionKey, invalid_key)
    app.add_exception_handler(ConfigurationError, configuration)
    app.add_exception_handler(StoreUnavailable, unavailable)
    app.add_exception_handler(EventLogError, store_error)


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is refused with 413 before the
    app reads it (by its Content-Length, or, for a chunked one, once that much has come)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await self._refuse(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        more = scope["method"] in ("POST", "PUT", "PATCH")
        while more:  # read it all now (bounded), then hand it on as it came
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent and scope["method"] in ("POST", "PUT", "PATCH"):
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = envelope(
            413, "payload_too_large", f"the request body is over {self.limit} bytes", None
        )
        await response(scope, receive, send)

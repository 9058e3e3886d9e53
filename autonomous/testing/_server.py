"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests and examples.

Model calls in this project's tests go through litellm's real HTTP path; this server is the other
end. It answers ``POST /v1/chat/completions`` (and ``/chat/completions``) with the next queued
*step*, plain JSON or server-sent events when the request asks for ``"stream": true``, and
``GET /v1/models`` with its model list::

    with ScriptedServer() as srv:
        srv.push(call("check_disk", {"path": "/"}), reply("all good"))
        model = LiteLLMModel("openai/scripted-model", api_base=srv.api_base, api_key="test")
        ...
        assert srv.requests[0]["tools"][0]["function"]["name"] == "check_disk"

Steps are frozen values built by :func:`reply`, :func:`call`, :func:`calls`, :func:`error`,
:func:`hang` and :func:`delay`. When the queue is empty the server plays
:attr:`ScriptedServer.default`, an HTTP 500 "script exhausted" error unless set otherwise, so a
test that under-scripts notices.
The server runs in a daemon thread and ``close()`` joins every thread it started.

Like OpenAI, the server refuses a request it could not run (:func:`check_chat_request`: a tool
call left unanswered, a tool message answering no call, a bad role, content or tool, a lone
surrogate) with an HTTP 400 and an OpenAI-shaped error body, before it plays any step. Each
refusal is kept in :attr:`ScriptedServer.rejections` and handed to the innermost
:func:`watch_rejections` block, so a test suite can fail any test whose runtime sent one.

``ScriptedServer(prefix_cache=True)`` bills prompts as OpenAI does (:mod:`._prefix_cache`): an
answer's ``prompt_tokens`` are estimated from the request itself and its ``cached_tokens`` are the
prefix the session's earlier requests had, in 128-token blocks from 1,024; the scripted
``input_tokens`` and ``cached_tokens`` of a step are then ignored, its ``output_tokens`` kept.
What each answered request was billed is in :attr:`ScriptedServer.prompt_usage`.
"""

from __future__ import annotations

import collections
import contextlib
import json
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

from ._prefix_cache import PrefixCache, PromptUsage
from ._rules import INVALID_JSON, Rejection, check_chat_request
from ._steps import (
    AnswerStep,
    DelayStep,
    ErrorStep,
    HangStep,
    ScriptedToolCall,
    Step,
    _chunks,
    _completion,
    call,
    calls,
    delay,
    error,
    hang,
    reply,
)
from ._watch import report_rejection, watch_rejections

__all__ = [
    "AnswerStep",
    "DelayStep",
    "ErrorStep",
    "HangStep",
    "PrefixCache",
    "PromptUsage",
    "Rejection",
    "ScriptedServer",
    "ScriptedToolCall",
    "Step",
    "call",
    "calls",
    "delay",
    "error",
    "hang",
    "reply",
    "watch_rejections",
]

_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_MODELS_PATHS = frozenset({"/v1/models", "/models"})
#: How often a waiting handler checks for shutdown and for a client that went away (seconds).
_POLL = 0.02
#: How long ``close()`` waits for a connection thread before calling it a bug (seconds).
_JOIN_TIMEOUT = 5.0

# --------------------------------------------------------------------------- HTTP


class _HTTPServer(ThreadingHTTPServer):
    """The stdlib threading server; its connection threads are joined by ``close()``."""

    daemon_threads = True

    def __init__(self, owner: ScriptedServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a daemon thread that :meth:`ScriptedServer.close` joins."""
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"ScriptedServer-{self.server_address[1]}-conn",
            daemon=True,
        )
        self.owner._track(thread)
        thread.start()


class _Handler(BaseHTTPRequestHandler):
    """One connection (HTTP/1.1 keep-alive); plays the next step for each chat request."""

    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests read the server's state, not its log."""

    def setup(self) -> None:
        super().setup()
        self.server.owner._register(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._unregister(self.connection)

    def _route(self) -> str:
        """The request path without query string or trailing slash."""
        return urllib.parse.urlsplit(self.path).path.rstrip("/")

    def do_GET(self) -> None:
        """``/v1/models``: the server's model list."""
        if self._route() in _MODELS_PATHS:
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "scripted"}
                for m in self.server.owner.models
            ]
            self._send_json(HTTPStatus.OK, {"object": "list", "data": data})
        else:
            self._send_error(HTTPStatus.NOT_FOUND, f"no route for GET {self.path}")

    def do_POST(self) -> None:
        """``/v1/chat/completions``: record the request, then play the next step."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self._route() not in _CHAT_PATHS:
            self._send_error(HTTPStatus.NOT_FOUND, f"no route for POST {self.path}")
            return
        body = _parse(raw)
        if body is None:
            self._refuse(None, Rejection(INVALID_JSON, None))
            return
        rejection = check_chat_request(body)
        if rejection is not None:
            self._refuse(body, rejection)
            return
        request_no, step = self.server.owner._take(body)
        try:
            self._play(step, body, request_no)
        except OSError:  # the client went away mid-answer
            self.close_connection = True
        if self.server.owner._closing.is_set():
            self.close_connection = True

    def _refuse(self, body: dict[str, Any] | None, rejection: Rejection) -> None:
        """Answer 400 as OpenAI does, without playing a step: the model never saw the request."""
        self.server.owner._reject(body, rejection)
        self._send_json(HTTPStatus.BAD_REQUEST, rejection.error_body())

    def _play(self, step: Step, body: dict[str, Any], request_no: int) -> None:
        if isinstance(step, DelayStep):
            if self._wait(step.seconds):
                self._play(step.step, body, request_no)
        elif isinstance(step, HangStep):
            self._wait(None)
        elif isinstance(step, ErrorStep):
            headers = {} if step.retry_after is None else {"Retry-After": step.retry_after}
            self._send_error(step.status, step.message, headers)
        elif body.get("stream"):
            options = body.get("stream_options") or {}
            include_usage = bool(options.get("include_usage"))
            self._send_stream(_chunks(step, str(body.get("model", "")), request_no, include_usage))
        else:
            self._send_json(
                HTTPStatus.OK, _completion(step, str(body.get("model", "")), request_no)
            )

    def _wait(self, seconds: float | None) -> bool:
        """Wait ``seconds`` (``None``: forever); False if cut short by the client or the server."""
        deadline = None if seconds is None else time.monotonic() + seconds
        closing = self.server.owner._closing
        while not closing.is_set():
            remaining = _POLL if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return True
            if self._client_gone(min(remaining, _POLL)):
                self.server.owner._count_disconnect()
                self.close_connection = True
                return False
        self.close_connection = True
        return False

    def _client_gone(self, timeout: float) -> bool:
        """Whether the client closed its end, polling the socket for up to ``timeout`` seconds."""
        readable, _, _ = select.select([self.connection], [], [], timeout)
        if not readable:
            return False
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
            gone = peeked == b""
        except OSError:
            return True
        if not gone:  # unexpected bytes: don't spin on them
            time.sleep(timeout)
        return gone

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        body = {"error": {"message": message, "type": kind, "code": status}}
        self._send_json(status, body, headers)

    def _send_stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self._write_chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _parse(raw: bytes) -> dict[str, Any] | None:
    """The request's JSON object, or None if it is not strict UTF-8 JSON holding an object."""
    try:
        # Strict UTF-8 first: json.loads(bytes) would let encoded surrogates through.
        body = json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError alike
        return None
    return body if isinstance(body, dict) else None


# --------------------------------------------------------------------------- server


class ScriptedServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 that plays queued steps.

    Use it as a context manager (or call :meth:`start` and :meth:`close`). ``steps`` are queued
    at once; :meth:`push` queues more. Each chat request takes the next step, or :attr:`default`
    when the queue is empty. Every attribute is safe to read from any thread.

    ``prefix_cache=True`` (or a :class:`PrefixCache` of your own, to share one between servers)
    makes each answer's prompt and cached tokens those a provider with prefix caching would
    report for the request (see the module docstring).
    """

    def __init__(
        self,
        *steps: Step,
        default: Step | None = None,
        models: Sequence[str] = ("scripted-model",),
        prefix_cache: bool | PrefixCache = False,
    ) -> None:
        #: Played when the queue is empty; a 500 "script exhausted" error unless set.
        self.default: Step = default if default is not None else ErrorStep(500, "script exhausted")
        #: The model ids ``GET /v1/models`` lists.
        self.models: tuple[str, ...] = tuple(models)
        #: The simulated provider cache, or None when answers carry their scripted usage.
        self.prefix_cache: PrefixCache | None = _prefix_cache(prefix_cache)
        self._prompt_usage: list[PromptUsage] = []
        self._lock = threading.Lock()
        self._queue: collections.deque[Step] = collections.deque(steps)
        self._requests: list[dict[str, Any]] = []
        self._rejections: list[Rejection] = []
        self._disconnects = 0
        self._connections: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ---------------------------------------------------------------

    def start(self) -> ScriptedServer:
        """Bind a free port and start serving in a daemon thread; returns ``self``."""
        if self._httpd is not None or self._closing.is_set():
            raise RuntimeError("a ScriptedServer can be started once")
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"ScriptedServer-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: end hanging requests, drop open connections, join every thread.

        Idempotent.
        """
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            _shutdown_socket(conn)
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(_JOIN_TIMEOUT)
            if thread.is_alive():
                raise RuntimeError(f"ScriptedServer: {thread.name} did not stop")

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # what tests read and write -----------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        if self._httpd is None:
            raise RuntimeError("the ScriptedServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def api_base(self) -> str:
        """The base URL to give litellm, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *steps: Step) -> None:
        """Queue ``steps``, played in order by the next chat requests."""
        with self._lock:
            self._queue.extend(steps)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def rejections(self) -> list[Rejection]:
        """The requests refused with HTTP 400 as OpenAI would refuse them, oldest first (a copy).

        A refused request takes no step; its body (when it parsed) is in :attr:`requests`.
        """
        with self._lock:
            return list(self._rejections)

    @property
    def prompt_usage(self) -> list[PromptUsage]:
        """With ``prefix_cache``: the prompt usage billed to each answered request, oldest first.

        Only requests answered with text or tool calls are billed (not refusals, errors or hangs).
        """
        with self._lock:
            return list(self._prompt_usage)

    @property
    def request_count(self) -> int:
        """How many chat requests the server has received."""
        with self._lock:
            return len(self._requests)

    @property
    def pending(self) -> int:
        """How many queued steps are still unplayed."""
        with self._lock:
            return len(self._queue)

    @property
    def disconnects(self) -> int:
        """How many waiting requests (hang, delay) ended because the client went away."""
        with self._lock:
            return self._disconnects

    def reset(self) -> None:
        """Forget queued steps, recorded requests, rejections and counters (``default`` stays)."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._rejections.clear()
            self._prompt_usage.clear()
            self._disconnects = 0
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    # called by handler threads -------------------------------------------------

    def _take(self, body: dict[str, Any]) -> tuple[int, Step]:
        with self._lock:
            self._requests.append(body)
            step = self._queue.popleft() if self._queue else self.default
            request_no = len(self._requests)
        return request_no, self._bill(body, step)

    def _bill(self, body: dict[str, Any], step: Step) -> Step:
        """``step`` with the prompt usage the prefix cache reports for ``body`` (when on)."""
        if self.prefix_cache is None:
            return step
        if isinstance(step, DelayStep):
            return attrs.evolve(step, step=self._bill(body, step.step))
        if not isinstance(step, AnswerStep):
            return step
        billed = self.prefix_cache.observe(body)
        with self._lock:
            self._prompt_usage.append(billed)
        return attrs.evolve(
            step, input_tokens=billed.prompt_tokens, cached_tokens=billed.cached_tokens
        )

    def _reject(self, body: dict[str, Any] | None, rejection: Rejection) -> None:
        with self._lock:
            if body is not None:
                self._requests.append(body)
            self._rejections.append(rejection)
        report_rejection(rejection)

    def _track(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)

    def _count_disconnect(self) -> None:
        with self._lock:
            self._disconnects += 1

    def _register(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)
            closing = self._closing.is_set()
        if closing:
            _shutdown_socket(conn)

    def _unregister(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)


def _prefix_cache(option: bool | PrefixCache) -> PrefixCache | None:
    if isinstance(option, PrefixCache):
        return option
    if not isinstance(option, bool):
        raise TypeError(f"prefix_cache must be a bool or a PrefixCache, got {option!r}")
    return PrefixCache() if option else None


def _shutdown_socket(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the other side
        conn.shutdown(socket.SHUT_RDWR)

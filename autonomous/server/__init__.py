"""The HTTP control API: sessions, their events and a live stream, control verbs, tokens.

``create_app(log, auth=...)`` is the API over one event log as an ASGI (FastAPI) app, to serve
with uvicorn or mount in one's own app.

Map:
    _auth.py    who a request is: Principal, Scope, the Authenticate hook
    _tokens.py  the log's tokens as that hook (token_auth): secrets made and digested
    _errors.py  the one error envelope, for every error (and the body limit, 413)
    _views.py   sessions as ``ls --json`` shows them, events as ``show --json``; content stripped
    _stream.py  a session's events as Server-Sent Events, from the log, with heartbeats
    _app.py     create_app: the routes, who may call each, the control verbs
    _uvicorn.py serving the app in the caller's event loop until cancelled (the serve command)
"""

from ._app import create_app
from ._auth import Authenticate, Principal, Scope, bearer_secret
from ._tokens import token_auth

__all__ = ["Authenticate", "Principal", "Scope", "bearer_secret", "create_app", "token_auth"]

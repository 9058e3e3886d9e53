"""The HTTP control API: sessions, their events and a live stream, control verbs, tokens.

Map:
    _auth.py    who a request is: Principal, Scope, the Authenticate hook
"""

from ._auth import Authenticate, Principal, Scope, bearer_secret

__all__ = ["Authenticate", "Principal", "Scope", "bearer_secret"]

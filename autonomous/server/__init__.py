"""The HTTP control API: sessions, their events and a live stream, control verbs, tokens.

Map:
    _auth.py    who a request is: Principal, Scope, the Authenticate hook
    _tokens.py  the log's tokens as that hook (token_auth): secrets made and digested
"""

from ._auth import Authenticate, Principal, Scope, bearer_secret
from ._tokens import token_auth

__all__ = ["Authenticate", "Principal", "Scope", "bearer_secret", "token_auth"]

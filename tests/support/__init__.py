"""Helpers shared by the test packages.

Map:
    litellm_http.py   calling models through litellm's real HTTP path against a ScriptedServer
    postgres.py       a fresh PostgreSQL schema per test (pg_dsn); CI never skips for want of one
    otel.py           a Telemetry on the OpenTelemetry SDK's in-memory exporter and reader
    loop_guard.py     what event loops reported during a test (the root conftest fails on it)
    well_formed.py    the autouse fixture failing a test that sent a request OpenAI would refuse
    watched_logs.py   in-memory logs with lease calls counted and a watch notified as LISTEN is
"""

from .litellm_http import API_KEY, MODEL, litellm_kwargs, litellm_model, wait_until

__all__ = ["API_KEY", "MODEL", "litellm_kwargs", "litellm_model", "wait_until"]

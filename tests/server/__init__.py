"""Tests of the HTTP control API (autonomous.server)."""

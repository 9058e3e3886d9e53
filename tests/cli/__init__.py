"""Tests of the ``autonomous`` command, through its real entry point (subprocesses)."""

"""Tests of the ``permissions`` package."""

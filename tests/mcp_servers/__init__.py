"""MCP servers the tests start as subprocesses, written with the SDK's own server API."""

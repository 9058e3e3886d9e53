"""Tools and the offline scripted model of ``monitor.toml``."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from typing import Any

from autonomous import ModelResponse
from autonomous.testing import ScriptedModel, call, reply

_CHECK = re.compile(r"check (\d+) of 3")


def check_disk(path: str = "/") -> dict[str, Any]:
    """Return the disk usage of ``path``: total bytes and the percentage used.

    Args:
        path: A directory on the filesystem to measure.
    """
    usage = shutil.disk_usage(path)
    return {
        "path": path,
        "used_pct": round(100 * usage.used / usage.total, 1),
        "total_bytes": usage.total,
    }


def scripted() -> ScriptedModel:
    """The offline stand-in for an LLM that follows the spec's instructions."""
    return ScriptedModel(default=_brain)


def _brain(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> ModelResponse:
    last = messages[-1]
    if last["role"] == "user":
        return call("check_disk", {"path": "/"})
    if last["role"] != "tool" or '"used_pct"' not in str(last["content"]):
        return reply("Noted.")
    used = json.loads(last["content"])["used_pct"]
    prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    found = _CHECK.search(str(prompt))
    check = int(found.group(1)) if found else 1
    if used > 90:
        return call(
            "report_done", {"state": "done", "outcome": "alert", "detail": f"Disk at {used}%."}
        )
    if check >= 3:
        detail = f"Three calm checks, last at {used}%."
        return call("report_done", {"state": "done", "outcome": "calm", "detail": detail})
    next_prompt = f"Re-check disk usage on / (check {check + 1} of 3; last reading {used}%)."
    return call("schedule_next_turn", {"wake_in_sec": 2, "next_prompt": next_prompt})

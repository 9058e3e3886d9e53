"""The root conftest's loop guard sees what event loops report and what is never awaited."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from _pytest.pytester import Pytester

from .support.loop_guard import LoopGuard, unawaited_after_collection


async def _idle() -> None:
    """A coroutine for the tests to leave never awaited."""


class TestLoopGuard:
    def test_a_report_from_a_plain_asyncio_run_loop_is_seen(self, loop_guard: LoopGuard) -> None:
        """A callback that raises under asyncio.run reaches the guard."""

        def fail() -> None:
            raise ValueError("from a callback")

        async def main() -> None:
            asyncio.get_running_loop().call_soon(fail)
            await asyncio.sleep(0)

        asyncio.run(main())
        assert [("Exception in callback", ValueError)] == [
            (c["message"].split(" fail")[0].split(" Test")[0], type(c.get("exception")))
            for c in loop_guard.reports
        ]
        loop_guard.clear()  # reported on purpose: this test must not fail for it

    @pytest.mark.anyio
    async def test_a_report_from_the_plugins_loop_is_seen(self, loop_guard: LoopGuard) -> None:
        """The loop the anyio plugin runs reports to the guard too."""
        asyncio.get_running_loop().call_exception_handler({"message": "reported"})
        assert ["reported"] == loop_guard.messages()
        loop_guard.clear()

    def test_a_coroutine_never_awaited_is_found_by_collecting(self) -> None:
        """A never-awaited coroutine kept alive by a reference cycle is found at collection."""
        cycle: list[Any] = [_idle()]
        cycle.append(cycle)
        del cycle
        assert ["coroutine '_idle' was never awaited"] == unawaited_after_collection()


_FAILING_TESTS = """
import asyncio

def test_callback_raises():
    def fail():
        raise ValueError("boom")

    async def main():
        asyncio.get_running_loop().call_soon(fail)
        await asyncio.sleep(0)

    asyncio.run(main())

async def idle():
    pass

def test_leaves_a_coroutine_unawaited():
    cycle = [idle()]
    cycle.append(cycle)

def test_clean():
    pass
"""


class TestTheGuardFailsTests:
    def test_a_loop_report_or_an_unawaited_coroutine_fails_the_test(
        self, pytester: Pytester, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Run under the project's conftest, each of the two signals fails its test; a clean
        test passes."""
        root = Path(__file__).resolve().parent.parent
        monkeypatch.setenv("PYTHONPATH", str(root))
        pytester.makeconftest("from tests.conftest import anyio_backend, loop_guard\n")
        pytester.makepyfile(test_signals=_FAILING_TESTS)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        result.assert_outcomes(passed=3, errors=2)
        result.stdout.fnmatch_lines(
            [
                "*event loop reported: Exception in callback*ValueError('boom')*",
                "*never awaited: coroutine 'idle' was never awaited*",
            ],
            consecutive=False,
        )

"""An autouse fixture: a test fails if anything it ran sent a request OpenAI would refuse.

ScriptedServer and ScriptedModel refuse such requests (a 400, a ConversationRejected) and report
each refusal to the innermost ``watch_rejections`` block. This fixture holds the outermost one for
every test, so a refusal fails the test even when the run under test swallowed the model error
(a retry policy that skips, a run expected to fail). A test that provokes a refusal on purpose
takes it in its own ``watch_rejections`` block.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autonomous.testing import Rejection, watch_rejections


@pytest.fixture(autouse=True)
def every_request_is_one_openai_accepts() -> Iterator[list[Rejection]]:
    """Fail the test (at teardown) for each request a scripted model or server refused."""
    with watch_rejections() as seen:
        yield seen
    if seen:
        listed = "\n".join(f"- {r.message} (param {r.param})" for r in seen)
        pytest.fail(f"requests OpenAI would refuse with HTTP 400 were sent:\n{listed}")

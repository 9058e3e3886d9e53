"""TerminalPrompter: y/N on text streams."""

from __future__ import annotations

import io
import json

import anyio
import pytest

from permissions import Caller, Gate, PermissionRequest, TerminalPrompter
from scheduler import FakeClock

from .permissions_helpers import QueueStream, WatchedOut, check_timing_out

pytestmark = pytest.mark.anyio


def request(**arguments: object) -> PermissionRequest:
    """A request for tool 'deploy' by caller 'alice' with the given arguments."""
    return PermissionRequest("deploy", arguments, Caller(identity="alice"), False)


async def ask(answer: str, req: PermissionRequest | None = None) -> tuple[bool, str]:
    """Ask one question with ``answer`` as the input; return the verdict and the output."""
    out = io.StringIO()
    allowed = await TerminalPrompter(io.StringIO(answer), out)(req or request(env="prod"))
    return allowed, out.getvalue()


class TestTerminalPrompterAnswers:
    """Which lines allow and which deny."""

    @pytest.mark.parametrize("answer", ["y\n", "yes\n", "Y\n", "  YES  \n", "y"])
    async def test_yes_allows(self, answer: str) -> None:
        """'y' or 'yes', in any case and with spaces, allows."""
        assert True is (await ask(answer))[0]

    @pytest.mark.parametrize("answer", ["n\n", "\n", "", "no\n", "yep\n", "sure\n"])
    async def test_anything_else_denies(self, answer: str) -> None:
        """Every other line, an empty line and end of input deny."""
        assert False is (await ask(answer))[0]

    async def test_reads_one_line_per_question(self) -> None:
        """Two questions read two lines in order."""
        prompter = TerminalPrompter(io.StringIO("y\nn\n"), io.StringIO())
        assert [True, False] == [await prompter(request()), await prompter(request())]

    async def test_broken_input_raises_for_the_gate(self) -> None:
        """A stream that fails to read raises, which the gate turns into a denial."""
        closed = io.StringIO()
        closed.close()
        decision = await Gate(prompter=TerminalPrompter(closed, io.StringIO())).check("t", {})
        assert (False, True) == (decision.allowed, "prompter failed" in decision.reason)


class TestTerminalPrompterOutput:
    """What the question shows."""

    async def test_shows_tool_caller_and_arguments(self) -> None:
        """The question names the tool and the caller and shows the arguments."""
        _, out = await ask("n\n")
        assert "tool deploy" in out
        assert "caller: alice" in out
        assert '{"env": "prod"}' in out
        assert out.endswith("allow? [y/N] ")

    async def test_read_only_and_admin_are_shown(self) -> None:
        """A read-only call and an admin caller are marked."""
        req = PermissionRequest("ls", {}, Caller(identity="root", admin=True), True)
        _, out = await ask("n\n", req)
        assert (True, True) == ("(read-only)" in out, "root [admin]" in out)

    async def test_a_destructive_tool_is_marked(self) -> None:
        """A tool that may destroy something says so (an MCP tool's destructiveHint)."""
        _, out = await ask("n\n", PermissionRequest("rm", {}, None, False, destructive=True))
        assert "tool rm (destructive: may delete or overwrite)" in out

    async def test_unknown_caller(self) -> None:
        """A call without a caller says the caller is unknown."""
        _, out = await ask("n\n", PermissionRequest("t", {}, None, False))
        assert "caller: (unknown)" in out

    async def test_long_arguments_are_truncated(self) -> None:
        """Arguments are shown in at most 200 characters, ending in an ellipsis."""
        _, out = await ask("n\n", request(body="x" * 10_000))
        shown = out.split("arguments: ", 1)[1].split("\n", 1)[0]
        assert (200, "…") == (len(shown), shown[-1])

    async def test_control_characters_are_escaped(self) -> None:
        """Escape sequences in the tool name or identity cannot reach the terminal."""
        req = PermissionRequest("t\x1b[2J", {}, Caller(identity="a\u202eb"), False)
        _, out = await ask("n\n", req)
        assert (False, False, True) == ("\x1b" in out, "\u202e" in out, "\\x1b[2J" in out)

    async def test_unserialisable_arguments_are_shown_by_repr(self) -> None:
        """Arguments JSON cannot encode are shown by their repr."""
        _, out = await ask("n\n", request(when={1, 2}))
        assert json.dumps(repr({1, 2}))[1:-1] in out

    async def test_default_streams_are_resolved_at_prompt_time(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without streams the prompter uses sys.stdin and sys.stderr as they are when asking."""
        prompter = TerminalPrompter()
        err = io.StringIO()
        monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
        monkeypatch.setattr("sys.stderr", err)
        assert True is await prompter(request())
        assert "tool deploy" in err.getvalue()


class TestTerminalPrompterTimeouts:
    """A prompt the gate gave up on, and the line that answers it late."""

    async def test_timeout_denies_and_late_yes_is_discarded(self) -> None:
        """A 'y' typed after its question timed out does not approve the next question."""
        stream, out = QueueStream(), io.StringIO()
        clock = FakeClock()
        gate = Gate(prompter=TerminalPrompter(stream, out), prompt_timeout=30)
        first = await check_timing_out(gate, clock, "one")
        stream.lines.put("y\n")
        await anyio.to_thread.run_sync(stream.reads_done.acquire)
        stream.lines.put("n\n")
        second = await gate.check("two", {}, clock=clock)
        assert (False, False, "denied by prompter", 2) == (
            first.allowed,
            second.allowed,
            second.reason,
            stream.reads_started,
        )
        assert "timed out" in first.reason

    async def test_pending_read_answers_the_next_question(self) -> None:
        """After a timeout the next question reuses the blocked read rather than start another."""
        stream, out = QueueStream(), WatchedOut()
        prompter = TerminalPrompter(stream, out)
        clock = FakeClock()
        first = await check_timing_out(Gate(prompter=prompter, prompt_timeout=30), clock, "one")
        result = []

        async def second() -> None:
            gate = Gate(prompter=prompter, prompt_timeout=30)
            result.append(await gate.check("two", {}, clock=clock))

        out.written = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await out.written.wait()
            stream.lines.put("yes\n")
        assert (False, [True], 1) == (
            first.allowed,
            [d.allowed for d in result],
            stream.reads_started,
        )

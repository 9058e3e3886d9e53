"""Per-model-call overhead of the loop next to peer agent SDKs, side by side in one process.

Runs the workload of ``bench/overhead.py`` through each framework: T model calls of a one-tool
loop (T-1 calls of an async ``tick(n) -> n + 1``, then a final answer "final"). No network and no
HTTP anywhere: each framework gets an in-process fake model that plays the same script, with
answers built once per T (as ScriptedModel's are) and reporting 10 input and 5 output tokens:

- ours: ``run_autonomous`` on ``ScriptedModel(check=False)``, in-memory session, logging off,
  ``max_turns=1`` (the T calls are one turn), as ``bench/overhead.py`` runs it;
- LangGraph: ``langgraph.prebuilt.create_react_agent`` on a ``BaseChatModel`` subclass whose
  ``_agenerate`` returns ``AIMessage``s with ``tool_calls``; ``ainvoke`` with a recursion limit
  of 2T + 10;
- OpenAI Agents SDK: ``agents.Agent`` on a ``agents.models.interface.Model`` returning
  ``ModelResponse``s of ``function_call`` items; ``Runner.run(max_turns=T + 5)``, tracing off;
- pydantic-ai: ``Agent`` on ``FunctionModel`` with an async function playing the script;
  ``agent.run`` with ``UsageLimits(request_limit=None)``.

Every tool is the same async function; every run checks that it made T model calls and T-1 tool
calls and ended with "final", and raises otherwise. Prints microseconds per model call (median
of several runs; the frameworks take turns, round after round, their order rotating, so that the
machine's drift falls on all alike) at T=50 and T=500, each peer's time over ours, and the
fastest peer's over ours. A peer that is not installed is reported as such; ours always runs.

Set up the peers' venv once (pinned versions in bench/requirements-peers.txt), then run:

    python3 -m venv .venv-peers && .venv-peers/bin/pip install -e . -r bench/requirements-peers.txt
    .venv-peers/bin/python bench/peers.py            # the full run (about six minutes)
    .venv-peers/bin/python bench/peers.py --quick    # fewer repetitions (about two)

Most of the time goes to the peers at T=500 (a run of the OpenAI Agents SDK takes about 25 s
there), hence fewer runs at T=500 than at T=50.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import statistics
import sys
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from overhead import timed  # the same round-robin harness (run as bench/peers.py)

#: The Ts the table reports.
TS = (50, 500)
#: Usage every scripted answer reports (ScriptedModel's defaults).
INPUT_TOKENS, OUTPUT_TOKENS = 10, 5
FINAL = "final"


@dataclass
class Counts:
    """What one run did: model calls, tool calls, and its final text."""

    model: int = 0
    tools: int = 0
    final: str = ""


def make_tick(counts: Counts) -> Callable[[int], Awaitable[int]]:
    """The tool every framework runs: ``tick(n) -> n + 1``, counting its calls."""

    async def tick(n: int) -> int:
        """Return n plus one."""
        counts.tools += 1
        return n + 1

    return tick


#: A built runner: plays one whole scripted run and returns what it did.
Runner = Callable[[], Awaitable[Counts]]


# ---- ours -------------------------------------------------------------------------------


def build_ours(calls: int) -> Runner:
    """run_autonomous on ScriptedModel, in-memory session (as bench/overhead.py)."""
    from autonomous import Agent, StopReason, function_tool, run_autonomous
    from autonomous.testing import ScriptedModel, call, reply

    counts = Counts()
    tool = function_tool(make_tick(counts))
    steps = [call("tick", {"n": i}, id=f"c{i}") for i in range(calls - 1)] + [reply(FINAL)]

    async def run() -> Counts:
        model = ScriptedModel(steps, record=False, check=False)

        def build(extra: list[Any]) -> Agent:
            return Agent(model, tools=[tool, *extra])

        result = await run_autonomous(build, "go", max_turns=1, max_model_calls_per_turn=calls)
        if (result.reason, result.turns) != (StopReason.MAX_TURNS_EXCEEDED, 1):
            raise RuntimeError(f"ours: unexpected result {result!r}")
        counts.model, counts.final = model.requests, result.final_text
        return counts

    return run


# ---- LangGraph --------------------------------------------------------------------------


def build_langgraph(calls: int) -> Runner:
    """create_react_agent on a scripted BaseChatModel (async generation, tools bound)."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool as lc_tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.prebuilt import create_react_agent

    counts = Counts()
    usage = {
        "input_tokens": INPUT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
    }
    steps = [
        AIMessage(
            content="",
            id=f"m{i}",
            tool_calls=[{"name": "tick", "args": {"n": i}, "id": f"c{i}", "type": "tool_call"}],
            usage_metadata=usage,
        )
        for i in range(calls - 1)
    ] + [AIMessage(content=FINAL, id=f"m{calls - 1}", usage_metadata=usage)]

    class ScriptedChatModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
            raise NotImplementedError("the benchmark runs the async path only")

        async def _agenerate(
            self, messages: list[BaseMessage], *args: Any, **kwargs: Any
        ) -> ChatResult:
            message = steps[counts.model]
            counts.model += 1
            return ChatResult(generations=[ChatGeneration(message=message)])

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    with warnings.catch_warnings():
        # create_react_agent is deprecated for langchain.agents.create_agent (another package).
        warnings.simplefilter("ignore")
        graph = create_react_agent(ScriptedChatModel(), [lc_tool(make_tick(counts))])
    config = {"recursion_limit": 2 * calls + 10}

    async def run() -> Counts:
        out = await graph.ainvoke({"messages": [("user", "go")]}, config=config)
        counts.final = out["messages"][-1].content
        return counts

    return run


# ---- OpenAI Agents SDK ------------------------------------------------------------------


def build_openai_agents(calls: int) -> Runner:
    """agents.Agent on a scripted agents Model returning function_call items."""
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)
    counts = Counts()

    def usage() -> Usage:
        return Usage(
            requests=1,
            input_tokens=INPUT_TOKENS,
            output_tokens=OUTPUT_TOKENS,
            total_tokens=INPUT_TOKENS + OUTPUT_TOKENS,
        )

    steps = [
        ModelResponse(
            output=[
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc{i}",
                    call_id=f"c{i}",
                    name="tick",
                    arguments=f'{{"n": {i}}}',
                )
            ],
            usage=usage(),
            response_id=None,
        )
        for i in range(calls - 1)
    ] + [
        ModelResponse(
            output=[
                ResponseOutputMessage(
                    type="message",
                    id="msg",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=FINAL, annotations=[])],
                )
            ],
            usage=usage(),
            response_id=None,
        )
    ]

    class ScriptedAgentsModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            response = steps[counts.model]
            counts.model += 1
            return response

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    agent = Agent(
        name="bench", model=ScriptedAgentsModel(), tools=[function_tool(make_tick(counts))]
    )

    async def run() -> Counts:
        result = await Runner.run(agent, "go", max_turns=calls + 5)
        counts.final = result.final_output
        return counts

    return run


# ---- pydantic-ai ------------------------------------------------------------------------


def build_pydantic_ai(calls: int) -> Runner:
    """pydantic_ai.Agent on FunctionModel with an async function playing the script."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage, UsageLimits

    counts = Counts()
    # With usage given, FunctionModel skips estimating it from the whole history at each call.
    usage = RequestUsage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)
    steps = [
        ModelResponse(
            parts=[ToolCallPart(tool_name="tick", args=f'{{"n": {i}}}', tool_call_id=f"c{i}")],
            usage=usage,
        )
        for i in range(calls - 1)
    ] + [ModelResponse(parts=[TextPart(FINAL)], usage=usage)]

    # Async, so that FunctionModel awaits it instead of running it in a worker thread.
    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        response = steps[counts.model]
        counts.model += 1
        return response

    agent = Agent(FunctionModel(play), tools=[make_tick(counts)])
    limits = UsageLimits(request_limit=None)

    async def run() -> Counts:
        result = await agent.run("go", usage_limits=limits)
        counts.final = result.output
        return counts

    return run


# ---- the harness ------------------------------------------------------------------------


@dataclass(frozen=True)
class Framework:
    """A framework under test: its table name, the distribution whose version is shown, and
    the function building its runner for T calls."""

    name: str
    dist: str
    build: Callable[[int], Runner]


OURS = Framework("autonomous (ours)", "bounded-autonomous", build_ours)
PEERS = (
    Framework("LangGraph", "langgraph", build_langgraph),
    Framework("OpenAI Agents SDK", "openai-agents", build_openai_agents),
    Framework("pydantic-ai", "pydantic-ai-slim", build_pydantic_ai),
)


def version(fw: Framework) -> str | None:
    """The framework's installed version, None if it is not installed."""
    try:
        return importlib.metadata.version(fw.dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def checked(fw: Framework, calls: int) -> Callable[[], Awaitable[None]]:
    """fw's runner for T=calls, raising unless each run did exactly the scripted work."""
    runner = fw.build(calls)

    async def run() -> None:
        counts = await runner()
        did = (counts.model, counts.tools, counts.final)
        if did != (calls, calls - 1, FINAL):
            raise RuntimeError(
                f"{fw.name} at T={calls}: (model calls, tool calls, final text) = {did!r},"
                f" expected {(calls, calls - 1, FINAL)!r}"
            )
        counts.model = counts.tools = 0
        counts.final = ""

    return run


async def main(quick: bool) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    logging.disable(logging.CRITICAL)
    installed = [fw for fw in (OURS, *PEERS) if version(fw) is not None]
    repeats = {50: 5, 500: 2} if quick else {50: 41, 500: 7}
    us: dict[tuple[str, int], float] = {}
    for calls in TS:
        fns = {fw.name: checked(fw, calls) for fw in installed}
        times = await timed(fns, repeats[calls])
        for name, t in times.items():
            us[(name, calls)] = statistics.median(t) / calls * 1e6

    print(
        f"python {sys.version.split()[0]}; microseconds per model call, median of"
        f" {repeats[50]} runs at T=50 and {repeats[500]} at T=500; x = their time / ours"
    )
    print()
    print(
        "| framework | version | µs/call T=50 | µs/call T=500 | T=500 / T=50 | x ours T=50 | x ours T=500 |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    ours = {calls: us[(OURS.name, calls)] for calls in TS}
    for fw in (OURS, *PEERS):
        v = version(fw)
        if v is None:
            print(f"| {fw.name} | not installed | | | | | |")
            continue
        t50, t500 = us[(fw.name, 50)], us[(fw.name, 500)]
        print(
            f"| {fw.name} | {v} | {t50:.1f} | {t500:.1f} | {t500 / t50:.2f}"
            f" | {t50 / ours[50]:.1f} | {t500 / ours[500]:.1f} |"
        )
    peers = [fw for fw in PEERS if version(fw) is not None]
    print()
    for calls in TS:
        if not peers:
            print(f"fastest peer / ours at T={calls}: no peer installed")
            continue
        fastest = min(peers, key=lambda fw: us[(fw.name, calls)])
        ratio = us[(fastest.name, calls)] / ours[calls]
        print(f"fastest peer / ours at T={calls}: {ratio:.1f} ({fastest.name})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    anyio.run(main, parser.parse_args().quick)

"""Start-up: a program or spec whose model is not litellm's never imports litellm (seconds).

Each test runs a real program in a subprocess and reads, from a line an ``atexit`` function
prints last, whether ``litellm`` was ever imported in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"
#: Runs ``argv[1:]`` as ``python argv[1:]`` would (a script path, or ``-m`` and a module), then
#: says on stderr, at the very end of the process, whether litellm was imported.
PROBE = """
import atexit, runpy, sys
atexit.register(lambda: print("litellm imported:", "litellm" in sys.modules, file=sys.stderr))
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""
#: A program with a scripted model under every cap that estimates the next call (tokens and
#: dollars, priced), with a scripted history summary model: the paths that consult a model's
#: limits before a call.
CAPPED_PROGRAM = """
import anyio
from autonomous import Agent, run_autonomous
from autonomous.testing import ScriptedModel, call, reply
from usage import Pricing

async def main() -> None:
    steps = [reply("one"), reply("two"), call("report_done", {"state": "done", "detail": "ok"})]
    model = ScriptedModel(steps, name="openai/gpt-4o-mini")
    result = await run_autonomous(
        lambda extra: Agent(model, tools=extra),
        "work",
        max_turns=5,
        max_input_tokens=100_000,
        max_cost_usd=1.0,
        pricing=Pricing(input_per_mtok=0.15, output_per_mtok=0.6),
        history_turns=1,
        history_summary_model=ScriptedModel(default=lambda m, t: reply("summary")),
    )
    print(result.reason.value)

anyio.run(main)
"""


def probe(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``python argv`` under :data:`PROBE` in ``cwd``, offline (no provider reachable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LITELLM_"))}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # never the internet, whatever happens
    env["NO_COLOR"] = "1"
    return subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def litellm_imported(done: subprocess.CompletedProcess[str]) -> bool:
    """What the probe's last line says (the test fails when the probe said nothing)."""
    said = [line for line in done.stderr.splitlines() if line.startswith("litellm imported:")]
    assert 1 == len(said), done.stdout + done.stderr
    return said[0].endswith("True")


class TestNoLitellmForAModelThatIsNotLitellms:
    """litellm is imported only by a call of a litellm model, never to start or run others."""

    def test_importing_the_library_and_its_command(self, tmp_path: Path) -> None:
        """Importing every package, the testing module and the command imports no litellm."""
        script = tmp_path / "imports.py"
        script.write_text(
            "import autonomous, autonomous.testing, autonomous._cli\n"
            "import eventlog, permissions, scheduler, usage\n"
        )
        assert False is litellm_imported(probe(tmp_path, str(script)))

    def test_the_offline_example(self, tmp_path: Path) -> None:
        """The README's first command, examples/monitor.py on its scripted model, completes
        without importing litellm."""
        done = probe(tmp_path, str(EXAMPLES / "monitor.py"), "--db", str(tmp_path / "r.db"))
        assert 0 == done.returncode, done.stdout + done.stderr
        assert "stop reason : completed" == done.stdout.splitlines()[0]
        assert False is litellm_imported(done)

    def test_autonomous_run_of_a_scripted_spec(self, tmp_path: Path) -> None:
        """``autonomous run`` of the example spec (a scripted model, a dollar cap, priced)
        runs its turn and exits deferred without importing litellm."""
        shutil.copytree(EXAMPLES / "specs", tmp_path / "specs")
        done = probe(tmp_path, "-m", "autonomous", "run", "specs/monitor.toml")
        assert "(deferred)" in done.stdout, done.stdout + done.stderr
        assert False is litellm_imported(done)

    def test_a_scripted_agent_under_caps_with_a_summary_model(self, tmp_path: Path) -> None:
        """A scripted model named like a litellm model, under token and dollar caps, with a
        scripted history summary model: its limits are not litellm's to say."""
        script = tmp_path / "capped.py"
        script.write_text(CAPPED_PROGRAM)
        done = probe(tmp_path, str(script))
        assert "completed" == done.stdout.strip(), done.stdout + done.stderr
        assert False is litellm_imported(done)

"""The start-up a user feels: importing the library, the offline example, `autonomous run`.

Each program runs in a fresh process, as a user starts it, ``--repeat`` times (5 by default);
each figure is the median wall time, with the fastest and slowest run beside it, and the median
CPU time (user and system) of the process, which a busy machine disturbs less. One more run
of each with ``PYTHONPROFILEIMPORTTIME`` says whether it imported litellm (which alone takes
seconds): none of these programs uses a litellm model, so none should.

- ``import autonomous``: ``python -c 'import autonomous'``.
- ``autonomous --help``: the command's own start, parsing included.
- ``autonomous run`` of ``examples/specs/monitor.toml`` (a scripted model, a dollar cap,
  priced): start, one turn, exit deferred; run in a fresh directory each time (its own log).
- ``examples/monitor.py``, the README's first command (a scripted model): three turns with two
  scheduled sleeps of one second; the last column takes those two seconds away.

    .venv/bin/python bench/startup.py
    .venv/bin/python bench/startup.py --repeat 9
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"
#: The seconds examples/monitor.py sleeps by its own schedule (two waits of wake_in_sec=1).
EXAMPLE_ASLEEP = 2.0


def command() -> list[str]:
    """The ``autonomous`` console script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("autonomous")
    return [str(script)] if script.exists() else [sys.executable, "-m", "autonomous"]


def run(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``argv`` to its end: its wall and CPU seconds, and its standard error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode not in (0, 10):  # 10: `autonomous run` exited deferred
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return elapsed, cpu, done.stderr


def programs() -> dict[str, Callable[[Path], list[str]]]:
    """Each program by name: the command line to run in a fresh directory."""

    def spec_run(directory: Path) -> list[str]:
        shutil.copytree(EXAMPLES / "specs", directory / "specs")
        return [*command(), "run", "specs/monitor.toml"]

    return {
        "import autonomous": lambda _: [sys.executable, "-c", "import autonomous"],
        "autonomous --help": lambda _: [*command(), "--help"],
        "autonomous run (scripted spec)": spec_run,
        "examples/monitor.py": lambda d: [
            sys.executable,
            str(EXAMPLES / "monitor.py"),
            "--db",
            str(d / "runs.db"),
        ],
    }


def measure(repeat: int) -> None:
    """Run every program ``repeat`` times and once more for its imports; print a table."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LITELLM_"))}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # offline, whatever happens
    env["NO_COLOR"] = "1"
    print(f"python {sys.version.split()[0]}; wall seconds, median of {repeat} (min-max)")
    print(f"{'program':<32}{'median':>8}{'min-max':>14}{'cpu':>7}{'litellm':>9}{'awake':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for index, (name, make) in enumerate(programs().items()):
            times, cpus = [], []
            for attempt in range(repeat + 1):
                directory = work / f"{index}-{attempt}"
                directory.mkdir()
                argv = make(directory)
                if attempt == repeat:  # the extra run: which modules it imported
                    stderr = run(argv, directory, {**env, "PYTHONPROFILEIMPORTTIME": "1"})[2]
                    litellm = any(line.endswith("| litellm") for line in stderr.splitlines())
                else:
                    wall, cpu, _ = run(argv, directory, env)
                    times.append(wall)
                    cpus.append(cpu)
            median, cpu = statistics.median(times), statistics.median(cpus)
            spread = f"{min(times):.2f}-{max(times):.2f}"
            awake = f"{median - EXAMPLE_ASLEEP:.2f}" if name.startswith("examples/") else "-"
            imported = "yes" if litellm else "no"
            print(f"{name:<32}{median:>8.2f}{spread:>14}{cpu:>7.2f}{imported:>9}{awake:>8}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each program (default 5)")
    measure(parser.parse_args().repeat)

"""What an operator looks at: progress lines, times with their zone, ls filters, show, follow."""

from __future__ import annotations

import json
import re
import shutil
import signal
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

from .conftest import BRAINS, Background, cli, session_events, write_spec

SLEEPING = '[scheduler]\nkind = "sleep"\n'
#: A zone of this machine's that is not UTC, so that local and UTC times differ.
INDIA = {"TZ": "IST-05:30"}
LOCAL_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+05:30"


class TestProgressLines:
    def test_a_pipe_gets_one_plain_line_per_turn_sleep_and_wake(self, agent_dir: Path) -> None:
        """On a pipe: a line per finished turn, the scheduled sleep with its wake time (relative,
        then local with its zone), the wake; no terminal control codes."""
        write_spec(agent_dir, "nap", "deferring", extra=SLEEPING)
        done = cli(agent_dir, "run", "nap.toml", "--session", "p1", env=INDIA)
        assert 0 == done.returncode, done.stderr
        lines = done.stderr.splitlines()[1:]
        assert re.fullmatch(r"turn 1 \| tokens 20 in / 10 out \| \$0\.000000 \| left: .*", lines[0])
        assert re.fullmatch(rf"next turn in 1s \({LOCAL_TIME}\)", lines[1]), lines
        assert ["woke after turn 1"] == lines[2:3]
        assert lines[3].startswith("turn 2 | tokens 40 in / 20 out")
        assert "\x1b" not in done.stderr


DEFERRING = '[scheduler]\nkind = "exit"\n'


def ls_sessions(cwd: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """The session ids ``ls --json ARGS`` lists."""
    done = cli(cwd, "ls", "--json", *args, env=env)
    assert 0 == done.returncode, done.stderr
    return [row["session_id"] for row in json.loads(done.stdout)]


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log with a completed session (q1), one napping for an hour (n1), both of app
    'tests', and a completed one of app 'other' (o1)."""
    directory = tmp_path_factory.mktemp("sessions")
    shutil.copy(BRAINS, directory / "brains.py")
    write_spec(directory, "quick", "quick")
    write_spec(directory, "nap", "napping", extra=DEFERRING)
    other = write_spec(directory, "other", "quick")
    other.write_text(other.read_text().replace('app = "tests"', 'app = "other"'))
    for spec, session, status in (("quick", "q1", 0), ("nap", "n1", 10), ("other", "o1", 0)):
        done = cli(directory, "run", f"{spec}.toml", "--session", session, "-q")
        assert status == done.returncode, done.stderr
    return directory


class TestTimes:
    def test_ls_shows_the_next_wake_relative_and_local(self, sessions: Path) -> None:
        """ls shows a wake an hour ahead as 'in 59m ..' and then the local time with its zone;
        --utc shows it in UTC."""
        local = cli(sessions, "ls", env=INDIA).stdout
        assert re.search(rf"in (59m \d\ds|1h 00m) \({LOCAL_TIME}\)", local), local
        utc = cli(sessions, "ls", "--utc", env=INDIA).stdout
        assert re.search(r"in (59m \d\ds|1h 00m) \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+00:00\)", utc)

    def test_show_and_the_run_summary_show_dates_and_zones(self, agent_dir: Path) -> None:
        """Every timeline line has its date and zone; a deferred run's summary says when it
        wakes, relative and local."""
        write_spec(agent_dir, "nap", "napping", extra=DEFERRING)
        done = cli(agent_dir, "run", "nap.toml", "--session", "n2", env=INDIA)
        assert re.search(rf"^next wake in (59m \d\ds|1h 00m) \({LOCAL_TIME}\)$", done.stdout, re.M)
        lines = cli(agent_dir, "show", "n2", env=INDIA).stdout.splitlines()[1:]
        assert lines and all(re.match(rf"\s+\d+  {LOCAL_TIME}  ", line) for line in lines)


class TestLsFilters:
    def test_status_filters_by_the_words_ls_shows(self, sessions: Path) -> None:
        """--status takes ls's words, repeated or as a comma list."""
        assert ["n1"] == ls_sessions(sessions, "--status", "deferred")
        assert ["o1", "n1", "q1"] == ls_sessions(sessions, "--status", "completed,deferred")
        assert ["o1", "n1", "q1"] == ls_sessions(
            sessions, "--status", "completed", "--status", "deferred"
        )

    def test_an_unknown_status_is_a_usage_error(self, sessions: Path) -> None:
        """A status ls never shows is refused, with the ones it does."""
        done = cli(sessions, "ls", "--status", "finished")
        assert 2 == done.returncode
        assert "finished" in done.stderr and "completed" in done.stderr

    def test_app_and_since(self, sessions: Path) -> None:
        """--app keeps one app's sessions; --since keeps those updated since a duration ago
        or an ISO date."""
        assert ["o1"] == ls_sessions(sessions, "--app", "other")
        assert ["o1", "n1", "q1"] == ls_sessions(sessions, "--since", "1h")
        assert [] == ls_sessions(sessions, "--since", "2999-01-01")
        assert "no sessions" in cli(sessions, "ls", "--since", "2999-01-01").stdout


class TestShow:
    def test_tail_says_how_many_events_it_left_out(self, sessions: Path) -> None:
        """show --tail 2 says '2 of N events'."""
        total = len(session_events(sessions, "q1"))
        shown = cli(sessions, "show", "q1", "--tail", "2").stdout
        assert f"session tests/tester/q1: 2 of {total} events" == shown.splitlines()[0]

    def test_an_exit_is_one_checkpoint_line(self, sessions: Path) -> None:
        """A deferred exit writes the turn's checkpoint and the final one: show prints one
        (the session's start record, a first checkpoint, is a line of its own)."""
        kinds = [e["kind"] for e in session_events(sessions, "n1")]
        assert 3 == kinds.count("checkpoint")  # what is written stays as it is
        shown = cli(sessions, "show", "n1", "--utc").stdout
        lines = shown.splitlines()
        checkpoints = [line for line in lines if " checkpoint " in line and "turns=0" not in line]
        assert 1 == len(checkpoints), shown
        assert "stop=deferred" in checkpoints[0]
        assert re.search(r"wake=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+00:00", checkpoints[0])

    def test_no_python_reprs(self, sessions: Path) -> None:
        """Notes and tool calls read as key=value text, not as Python dicts."""
        shown = cli(sessions, "show", "q1", "--full").stdout
        assert "{'" not in shown and "': " not in shown, shown
        assert f'agent spec spec="{sessions / "quick.toml"}" model=null' in shown
        assert 'report_done(state="done", detail="all done")' in shown
        assert "detail='" not in shown and 'detail="all done"' in shown


class TestVersionAndDb:
    def test_version_is_the_distribution_s(self, agent_dir: Path) -> None:
        """--version prints the installed distribution's version; --help names it."""
        done = cli(agent_dir, "--version")
        assert (0, f"autonomous {version('bounded-autonomous')}") == (
            done.returncode,
            done.stdout.strip(),
        )
        assert "--version" in cli(agent_dir, "--help").stdout

    def test_autonomous_db_is_the_default_log_and_the_flag_wins(self, agent_dir: Path) -> None:
        """AUTONOMOUS_DB names the log when --db is not given; --db wins over it."""
        write_spec(agent_dir, "quick", "quick")
        env = {"AUTONOMOUS_DB": str(agent_dir / "elsewhere.db")}
        assert 0 == cli(agent_dir, "run", "quick.toml", "--session", "e1", "-q", env=env).returncode
        assert (agent_dir / "elsewhere.db").exists()
        assert not (agent_dir / "autonomous.db").exists()
        assert ["e1"] == ls_sessions(agent_dir, env=env)
        flag = cli(agent_dir, "ls", "--db", "autonomous.db", env=env)
        assert (2, True) == (flag.returncode, "no event log at autonomous.db" in flag.stderr)
        assert "AUTONOMOUS_DB" in cli(agent_dir, "--help").stdout


def seqs(output: str) -> list[int]:
    """The seqs of a timeline's lines."""
    return [int(line.split()[0]) for line in output.splitlines() if line[:6].strip().isdigit()]


class TestFollow:
    def test_follow_prints_new_events_until_the_session_exits(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """show --follow prints what is there, then each new event once, in order, and exits
        0 after the final checkpoint, shown as the last line."""
        write_spec(agent_dir, "loop", "looping")
        run = start(agent_dir, "run", "loop.toml", "--session", "f1")
        run.wait_for(r"^turn 1 \|")
        tail = start(agent_dir, "show", "f1", "--follow")
        tail.wait_for(r"^session tests/tester/f1: \d+ events$", stream="stdout")
        seen = tail.count(r"tick ok", stream="stdout")
        tail.wait_for(rf"\[turn {seen + 2}\] tick ok", stream="stdout")  # appended since
        assert 0 == cli(agent_dir, "inject", "f1", "please finish").returncode
        assert 0 == run.finish()
        assert 0 == tail.finish()
        out = tail.stdout()
        numbers = seqs(out)
        assert numbers == sorted(set(numbers)) and len(numbers) > 5
        assert [e["seq"] for e in session_events(agent_dir, "f1")][-1] == numbers[-1]
        assert "please finish" in out
        assert re.search(r" checkpoint .* stop=completed", out.splitlines()[-1]), out
        assert [] == tail.lines["stderr"]

    def test_ctrl_c_ends_following_with_130(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """Ctrl-C ends show --follow with status 130 and no traceback; the run goes on."""
        write_spec(agent_dir, "loop", "looping")
        run = start(agent_dir, "run", "loop.toml", "--session", "f2")
        run.wait_for(r"^turn 1 \|")
        tail = start(agent_dir, "show", "f2", "--follow")
        tail.wait_for(r"tick ok", stream="stdout")
        tail.proc.send_signal(signal.SIGINT)
        assert 130 == tail.finish()
        assert [] == tail.lines["stderr"]
        assert run.proc.poll() is None
        cli(agent_dir, "stop", "f2")
        assert 15 == run.finish()

    def test_a_session_that_has_exited_is_shown_and_left_at_once(self, sessions: Path) -> None:
        """Following a session that has exited prints its timeline and exits 0."""
        done = cli(sessions, "show", "q1", "--follow")
        assert 0 == done.returncode, done.stderr
        assert "stop=completed" in done.stdout.splitlines()[-1]

    def test_json_follow_prints_one_event_a_line(self, sessions: Path) -> None:
        """With --json, --follow prints each event as one JSON document on its own line."""
        done = cli(sessions, "show", "q1", "--follow", "--json")
        assert 0 == done.returncode, done.stderr
        events = [json.loads(line) for line in done.stdout.splitlines()]
        assert session_events(sessions, "q1") == events


class TestDaemonLines:
    def test_each_line_starts_with_its_date_and_zone(self, agent_dir: Path) -> None:
        """The daemon's readable lines start with the local date, time and zone (--utc: UTC)."""
        local = cli(agent_dir, "daemon", "--once", env=INDIA)
        assert 0 == local.returncode, local.stderr
        lines = local.stdout.splitlines()
        assert lines and all(re.match(rf"{LOCAL_TIME} daemon_", line) for line in lines), lines
        utc = cli(agent_dir, "daemon", "--once", "--utc", env=INDIA).stdout
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+00:00 daemon_started", utc)

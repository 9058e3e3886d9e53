"""A PyPI namesake of one of our top-level packages fails `import autonomous` in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def impostor(directory: Path, package: str = "eventlog", dist: str = "eventlog_impostor") -> Path:
    """A fake ``package`` in ``directory``, with the ``.dist-info`` of a distribution ``dist``
    that says it installed it (as pip leaves it)."""
    (directory / package).mkdir()
    (directory / package / "__init__.py").write_text('"""Somebody else\'s package."""\n')
    info = directory / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "top_level.txt").write_text(f"{package}\n")
    return directory


def python(*args: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with ``path`` ahead of everything else on ``PYTHONPATH``."""
    env = {**os.environ}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), str(ROOT)])
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=path or ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class TestPackageClash:
    """Our packages carry a marker; a package without it in their place is named, with the fix."""

    def test_the_command_says_it_in_one_line(self, tmp_path: Path) -> None:
        """``python -m autonomous --help`` exits non-zero with one line naming the impostor."""
        done = python("-m", "autonomous", "--help", path=impostor(tmp_path))

        lines = done.stderr.strip().splitlines()
        assert (True, 1) == (done.returncode != 0, len(lines)), done.stderr
        assert "eventlog_impostor" in lines[0]
        assert "pip uninstall eventlog_impostor" in lines[0]
        assert "Traceback" not in done.stderr

    def test_the_console_script_says_it_in_one_line(self, tmp_path: Path) -> None:
        """The installed ``autonomous`` script: the same one line, exit 2, no traceback."""
        script = Path(sys.executable).with_name("autonomous")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(impostor(tmp_path)), str(ROOT)])}
        done = subprocess.run(
            [str(script), "--help"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        lines = done.stderr.strip().splitlines()
        assert (2, 1) == (done.returncode, len(lines)), done.stderr
        assert "pip uninstall eventlog_impostor" in lines[0] and "Traceback" not in done.stderr
        assert 0 == subprocess.run([str(script), "--version"], timeout=60, check=False).returncode

    def test_import_raises_an_import_error(self, tmp_path: Path) -> None:
        """``import autonomous`` raises an ImportError subclass that names the package, the
        distribution and a separate virtual environment as the other way out."""
        code = (
            "import sys\n"
            "try:\n"
            "    import autonomous\n"
            "except ImportError as exc:\n"
            "    print(type(exc).__name__, issubclass(type(exc), ImportError), exc.package)\n"
            "    print(exc)\n"
            "    sys.exit(0)\n"
            "sys.exit('imported')\n"
        )
        done = python("-c", code, path=impostor(tmp_path))

        assert 0 == done.returncode, done.stderr
        kind, message = done.stdout.splitlines()
        assert "PackageClash True eventlog" == kind
        wanted = [
            "'eventlog'",
            str(tmp_path / "eventlog"),
            "eventlog_impostor",
            "virtual environment",
        ]
        assert [] == [part for part in wanted if part not in message], message

    @pytest.mark.parametrize("package", ["scheduler", "usage", "permissions"])
    def test_every_namesake_is_caught(self, tmp_path: Path, package: str) -> None:
        """The check covers each of our top-level packages that PyPI also has."""
        done = python("-m", "autonomous", "--help", path=impostor(tmp_path, package, "other"))

        lines = done.stderr.strip().splitlines()
        assert (True, 1) == (done.returncode != 0, len(lines)), done.stderr
        assert f"'{package}'" in lines[0] and "pip uninstall other" in lines[0]

    def test_our_packages_pass(self) -> None:
        """Without an impostor the command starts."""
        done = python("-m", "autonomous", "--help")

        assert (0, "") == (done.returncode, done.stderr)

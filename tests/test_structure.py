"""The shape of the library's code: layers without circles, tasks in task groups, module maps.

No size limits: a module is split where a concept ends, never to meet a line count (a long
function that reads top to bottom is fine), and review judges the shape.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["autonomous", "eventlog", "usage", "permissions", "scheduler"]
#: The edges of ``autonomous``: sub-packages the core never imports (it is imported by them).
EDGES = (
    "autonomous.testing",
    "autonomous._cli",
    "autonomous.fleet",
    "autonomous.spec",
    "autonomous.local",
    "autonomous.server",
)


def _modules() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The modules of ours that ``path`` imports, at any depth (TYPE_CHECKING blocks too)."""
    tree = ast.parse(path.read_text())
    package = _name(path) if path.name == "__init__.py" else _name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names]
            found.update(n for n in [target, *names] if _known(n))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if _known(a.name))
    return found


_KNOWN = {_name(p) for p in _modules()}


def _known(name: str) -> bool:
    return name in _KNOWN


class TestLayers:
    @pytest.mark.parametrize(
        "package", [p for p in sorted(_KNOWN) if (ROOT / p.replace(".", "/")).is_dir()]
    )
    def test_no_import_circle_among_a_packages_modules(self, package: str) -> None:
        """Within a package the modules import each other one way only, TYPE_CHECKING too."""
        members = {_name(p): p for p in _modules() if _name(p).rpartition(".")[0] == package}
        graph = {
            name: {m for m in _imports(path) if m in members and m != name}
            for name, path in members.items()
        }
        assert [] == _cycles(graph)

    def test_the_core_never_imports_its_edges(self) -> None:
        """The core modules of ``autonomous`` import neither the CLI nor the testing helpers."""
        # The top level's moved names reach the edges on first use, and ``python -m
        # autonomous`` is the CLI: those two are faces, every other module is the core's.
        core = [p for p in (ROOT / "autonomous").rglob("*.py") if self._layer(_name(p)) is not None]
        crossing = sorted(
            f"{_name(p)} -> {m}" for p in core for m in _imports(p) if m.startswith(EDGES)
        )
        assert [] == crossing

    def test_spec_files_never_import_the_command(self) -> None:
        """autonomous.spec, which the CLI and the daemon both use, imports nothing of the CLI."""
        crossing = sorted(
            f"{_name(p)} -> {m}"
            for p in (ROOT / "autonomous" / "spec").rglob("*.py")
            for m in _imports(p)
            if m.startswith("autonomous._cli")
        )
        assert [] == crossing

    #: The core of ``autonomous`` from the bottom up: the top level's vocabulary, then the
    #: concept folders (and the top-level modules that configure a run). A module imports from
    #: its own layer or the ones below, never from one above.
    CORE_LAYERS = (
        ("_errors", "_logging", "_clash", "_text", "_model", "_result", "_callers", "_progress"),
        ("retry",),
        ("_tools",),
        ("_observe",),
        ("_agent", "_steering", "_options"),
        ("_state",),
        ("_control",),
        ("_durable",),
        ("_run",),
    )
    #: Sub-packages outside the layers: the edges and the public faces.
    OUTSIDE = (
        "_models",
        "_cli",
        "fleet",
        "spec",
        "testing",
        "mcp",
        "local",
        "server",
        "__init__",
        "__main__",
    )

    def _layer(self, module: str) -> int | None:
        part = module.split(".")[1] if module.count(".") else "__init__"
        for i, layer in enumerate(self.CORE_LAYERS):
            if part in layer:
                return i
        assert part in self.OUTSIDE, f"{module} is in no layer of CORE_LAYERS"
        return None

    def test_the_core_imports_its_own_layer_or_lower_ones(self) -> None:
        """No core module imports from a layer above its own: the folders show the design."""
        upward = []
        for path in (ROOT / "autonomous").rglob("*.py"):
            name = _name(path)
            mine = self._layer(name)
            if mine is None:
                continue
            for target in _imports(path):
                theirs = self._layer(target) if target.startswith("autonomous.") else None
                if theirs is not None and theirs > mine:
                    upward.append(f"{name} -> {target}")
        assert [] == sorted(upward)

    def test_lower_packages_never_import_autonomous(self) -> None:
        """usage, permissions, eventlog and scheduler depend on nothing of autonomous."""
        crossing = sorted(
            f"{_name(p)} -> {m}"
            for p in _modules()
            if not _name(p).startswith("autonomous")
            for m in _imports(p)
            if m.startswith("autonomous")
        )
        assert [] == crossing


class TestConcurrency:
    #: Loop callbacks and bare tasks: every task lives in a task group, every timer is a
    #: cancel scope or a sleep on the run's clock. ``call_soon_threadsafe`` stays allowed:
    #: it is how another thread wakes the loop (``request_wake`` from a thread).
    FORBIDDEN = re.compile(r"\.(call_soon|call_later|call_at|create_task|ensure_future)\(")

    def test_no_loop_callbacks_or_bare_tasks_in_library_code(self) -> None:
        """No library module schedules loop callbacks or starts tasks outside a task group."""
        found = [
            f"{_name(p)}:{i}: {line.strip()}"
            for p in _modules()
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if self.FORBIDDEN.search(line) and not line.lstrip().startswith("#")
        ]
        assert [] == found


class TestDocstrings:
    def test_every_module_states_its_purpose(self) -> None:
        """Every module of every package, sub-packages included, opens with a docstring."""
        bare = [_name(p) for p in _modules() if not ast.get_docstring(ast.parse(p.read_text()))]
        assert [] == bare

    @pytest.mark.parametrize(
        "package",
        sorted({p.parent for p in _modules() if p.name == "__init__.py"}),
        ids=lambda p: _name(p / "__init__.py"),
    )
    def test_every_package_map_names_each_of_its_modules(self, package: Path) -> None:
        """A package's docstring maps its modules: each one and each sub-package is named."""
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        named = set(re.findall(r"[\w.]+\.py|\w+/", doc))
        parts = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
        parts |= {f"{d.name}/" for d in package.iterdir() if (d / "__init__.py").is_file()}
        assert [] == sorted(parts - named)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle of ``graph`` once, as the list of modules along it."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == start:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    found.append([*path, start])
            elif nxt not in path and nxt > start:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found

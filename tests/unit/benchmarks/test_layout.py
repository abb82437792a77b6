"""benchmarks/ keeps its shape: every top-level module is a program (an entry point)
that imports, of benchmarks/, only benchmarks.common; benchmarks.common imports no
program; every program common starts by name (``-m benchmarks.X``) exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.paths import REPO

BENCHMARKS = REPO / "benchmarks"
PROGRAMS = sorted(p for p in BENCHMARKS.glob("*.py") if p.name != "__init__.py")
COMMON = sorted((BENCHMARKS / "common").glob("*.py"))


def benchmark_imports(path: Path) -> set[str]:
    """The benchmarks.* modules ``path`` imports (anywhere in it)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n == "benchmarks" or n.startswith("benchmarks.")}


def test_the_tree_has_programs_and_a_common_package():
    assert len(PROGRAMS) > 10 and len(COMMON) > 5


def test_programs_import_only_benchmarks_common():
    wrong = {p.name: sorted(n for n in benchmark_imports(p) if not n.startswith("benchmarks.common"))
             for p in PROGRAMS}
    assert {name: mods for name, mods in wrong.items() if mods} == {}


def test_common_imports_no_program():
    programs = {f"benchmarks.{p.stem}" for p in PROGRAMS}
    wrong = {p.name: sorted(benchmark_imports(p) & programs) for p in COMMON}
    assert {name: mods for name, mods in wrong.items() if mods} == {}


def test_every_program_started_by_name_exists():
    started = set()
    for path in [*COMMON, *PROGRAMS]:
        text = path.read_text()
        started |= set(re.findall(r'"-m",\s*"benchmarks\.(\w+)"', text))
        started |= set(re.findall(r'python_argv\(\s*"benchmarks\.(\w+)"', text))
        started |= set(re.findall(r'loopback_if_root\(\s*"benchmarks\.(\w+)"', text))
    assert started, "no program started by name found: the patterns above are stale"
    assert sorted(s for s in started if not (BENCHMARKS / f"{s}.py").is_file()) == []


def test_a_program_reruns_itself_in_the_namespace_not_another():
    calls = {p.stem: re.findall(r'loopback_if_root\(\s*"benchmarks\.(\w+)"', p.read_text()) for p in PROGRAMS}
    assert any(calls.values())
    assert {stem: found for stem, found in calls.items() if set(found) - {stem}} == {}

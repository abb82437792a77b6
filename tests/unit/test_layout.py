"""The layout rules of docs/development.md, checked on the real tree by
``scripts/import_graph.py`` (no import cycle, even inside functions; loadtest stands alone;
only the sweep joins loadtest and serving)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

SCRIPT = REPO / "scripts" / "import_graph.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tree_keeps_the_layout_rules():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout
    assert "no import cycle; no forbidden import" in result.stdout


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path):
    _write(tmp_path, {
        "loadtest/__init__.py": "",
        "loadtest/cli.py": "def main():\n    from loadtest.run import go\n",
        "loadtest/run.py": "from . import cli\n",
    })
    graph = _load_script()
    found = graph.violations(graph.build_graph(tmp_path)[0])
    assert found == ["import cycle: loadtest.cli <-> loadtest.run"]


def test_loadtest_importing_serving_or_the_sweep_is_forbidden(tmp_path: Path):
    _write(tmp_path, {
        "loadtest/__init__.py": "",
        "loadtest/cli.py": "from importlib import import_module\n\ndef go():\n    import_module('sweep.cli')\n",
        "loadtest/config.py": "import serving.errors\n",
        "serving/__init__.py": "",
        "serving/errors.py": "",
        "sweep/__init__.py": "",
        "sweep/cli.py": "import loadtest.config\nimport serving.errors\n",
    })
    graph = _load_script()
    found = graph.violations(graph.build_graph(tmp_path)[0])
    assert found == [
        "loadtest.cli imports sweep.cli (loadtest must not import sweep)",
        "loadtest.config imports serving.errors (loadtest must not import serving)",
    ]


def test_type_checking_imports_do_not_count(tmp_path: Path):
    _write(tmp_path, {
        "loadtest/__init__.py": "",
        "loadtest/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loadtest.b import B\n",
        "loadtest/b.py": "from loadtest.a import *\n",
    })
    graph = _load_script()
    assert graph.violations(graph.build_graph(tmp_path)[0]) == []


def test_the_simulator_sits_beside_the_sweep_never_inside_loadtest_or_serving(tmp_path: Path):
    _write(tmp_path, {
        "loadtest/__init__.py": "",
        "loadtest/cli.py": "import simulator.core\n",
        "serving/__init__.py": "",
        "serving/app.py": "from simulator import core\n",
        "simulator/__init__.py": "",
        "simulator/core.py": "import loadtest\nimport serving\n",
        "simulator/cli.py": "import sweep.plan\n",
        "sweep/__init__.py": "",
        "sweep/plan.py": "import simulator.core\n",
    })
    graph = _load_script()
    found = graph.violations(graph.build_graph(tmp_path)[0])
    assert found == [
        "loadtest.cli imports simulator.core (loadtest must not import simulator)",
        "serving.app imports simulator (serving must not import simulator)",
        "serving.app imports simulator.core (serving must not import simulator)",
        "simulator.cli imports sweep.plan (simulator must not import sweep)",
    ]

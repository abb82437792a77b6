"""The layout rules of docs/development.md, checked on the real tree by
``scripts/import_graph.py`` (no import cycle, even inside functions; loadtest stands alone;
only the sweep joins loadtest and serving; serving's layers import downwards; no module
past the size rule)."""

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
        "serving/app_builder.py": "from simulator import core\n",
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
        "serving.app_builder imports simulator (serving must not import simulator)",
        "serving.app_builder imports simulator.core (serving must not import simulator)",
        "simulator.cli imports sweep.plan (simulator must not import sweep)",
    ]


def test_a_serving_layer_importing_a_higher_one_is_found(tmp_path: Path):
    _write(tmp_path, {
        "serving/__init__.py": "",
        "serving/errors.py": "",
        "serving/routing/__init__.py": "",
        "serving/routing/policy.py": "import serving.errors\nfrom serving.direct import router\n",
        "serving/direct/__init__.py": "",
        "serving/direct/router.py": "import serving.errors\n",
        "serving/extra.py": "",
    })
    graph = _load_script()
    found = graph.violations(graph.build_graph(tmp_path)[0])
    assert found == [
        "serving.extra is in no layer of SERVING_LAYERS (scripts/import_graph.py)",
        "serving.routing.policy (layer 2) imports serving.direct (layer 3): serving's layers import downwards only",
        "serving.routing.policy (layer 2) imports serving.direct.router (layer 3): serving's layers import downwards only",
    ]


def test_a_module_past_the_size_rule_is_found_unless_listed(tmp_path: Path, monkeypatch):
    graph = _load_script()
    _write(tmp_path, {
        "loadtest/__init__.py": "",
        "loadtest/long.py": "x = 1\n" * (graph.MAX_LINES + 1),
        "loadtest/short.py": "x = 1\n" * graph.MAX_LINES,
    })
    found = graph.violations(*graph.build_graph(tmp_path))
    assert found == [f"loadtest.long has {graph.MAX_LINES + 1} lines (> {graph.MAX_LINES}): split it, "
                     "or list it in LONG_MODULES with the reason"]
    monkeypatch.setitem(graph.LONG_MODULES, "loadtest.long", "one table, kept whole")
    assert graph.violations(*graph.build_graph(tmp_path)) == []

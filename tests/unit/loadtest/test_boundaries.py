"""Design boundaries: the orchestrator never imports gevent/Locust; nothing here imports
Ray or serving; the public API is importable and complete."""

import os
import subprocess
import sys

import loadtest
from tests.paths import REPO

ROOT = REPO


def imported_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return set(out.stdout.split())


def test_orchestrator_side_never_imports_gevent_locust_ray_or_serving():
    modules = imported_after(
        "import loadtest.cli, loadtest.run.orchestrator, loadtest.reports, loadtest.analysis.summary\n"
        "from loadtest import run_load_test, load_summary, compare_summaries"
    )
    assert not modules & {"gevent", "locust", "ray", "serving"}


def test_generator_side_never_imports_ray_or_serving():
    modules = imported_after("import locust\nimport loadtest.generator.main\nimport loadtest.generator.locustfile")
    assert "locust" in modules and not modules & {"ray", "serving", "matplotlib", "httpx"}


def test_public_api_resolves():
    for name in loadtest.__all__:
        assert getattr(loadtest, name) is not None, name
    assert issubclass(loadtest.TargetError, loadtest.LoadTestError)

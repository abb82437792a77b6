"""The quality probe of one version: ``loadtest quality`` run as a separate program
(``serving`` does not import the load tester) against the stack's endpoint; its JSON
report read back as (correct, items)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from serving.cluster.netns import python_argv
from serving.config.rollout import QualitySettings
from serving.errors import ServeoutError

PROBE_TIMEOUT_S = 900


def probe_quality(url: str, model: str, settings: QualitySettings, api_key: str | None = None) -> tuple[int, int]:
    """Right answers and items asked of ``model`` at ``url`` (temperature 0)."""
    with tempfile.TemporaryDirectory(prefix="serveout-quality-") as folder:
        report = Path(folder) / "report.json"
        command = python_argv("loadtest", ["quality", "--target", url, "--model", model, "--concurrency",
                                           str(settings.concurrency), "--json", str(report), "--quiet"])
        if settings.items is not None:
            command += ["--items", str(settings.items)]
        if settings.limit is not None:
            command += ["--limit", str(settings.limit)]
        env = {**os.environ, **({"OPENAI_API_KEY": api_key} if api_key else {})}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            raise ServeoutError(f"the quality probe of {model} took over {PROBE_TIMEOUT_S} s") from None
        if done.returncode != 0 or not report.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ServeoutError(f"the quality probe of {model} failed: {' '.join(tail) or done.returncode}")
        overall = json.loads(report.read_text())["overall"]
        return int(overall["correct"]), int(overall["items"])

"""Our user class under Locust's own command line (the web UI path), against the FAKE
server: headless, a few seconds, raw records written."""

import json
import os
import subprocess
import sys

from loadtest.analysis.records import read_records
from tests.paths import REPO
from tests.unit.loadtest.fake_openai_server import FakeServer

ROOT = REPO


def test_locust_headless_with_our_user(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello"}) + "\n")
    records = tmp_path / "records.jsonl"
    with FakeServer() as server:
        result = subprocess.run(
            [
                sys.executable, "-m", "locust", "-f", str(ROOT / "loadtest" / "generator" / "locustfile.py"),
                "--headless", "-u", "2", "-r", "2", "--run-time", "3s", "--stop-timeout", "10", "--host", server.url,
                "--lt-model", "fake-model", "--lt-workload", f"jsonl:path={prompts},output_len=6",
                "--lt-records", str(records), "--only-summary",
            ],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "TTFT" in result.stdout + result.stderr  # our extra row in Locust's table
    rows = read_records(records)
    assert rows and all(r.ok and r.output_tokens == 6 for r in rows)

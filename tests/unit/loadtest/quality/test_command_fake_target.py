"""``loadtest quality`` end to end against the FAKE OpenAI server (it answers " w" per
token), and its clear errors. The real engine's scores: tests/integration/test_loadtest.py."""

import json
import re
import subprocess
import sys

import pytest

from loadtest.cli import main
from loadtest.errors import ExitCode
from tests.unit.loadtest.fake_openai_server import BASE, FakeServer


@pytest.fixture
def items_file(tmp_path):
    lines = [
        {"id": "echo", "category": "fake", "source": "test", "prompt": "Say w four times.", "max_tokens": 4,
         "answers": ["w w w w"]},
        {"id": "wrong", "category": "fake", "source": "test", "prompt": "Capital of France?", "answers": ["Paris"]},
        {"id": "fails", "category": "other", "source": "test", "prompt": "#500 engine error", "number": 1},
    ]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_scores_and_writes_every_reply(items_file, tmp_path, capsys):
    out = tmp_path / "quality.json"
    with FakeServer() as server:
        code = main(["quality", "--target", server.url, "--model", BASE, "--items", str(items_file),
                     "--json", str(out), "--quiet"])
    assert code == ExitCode.OK
    printed = capsys.readouterr().out
    assert "33.3% (1/3), 95% CI [6.1%, 79.2%]" in printed
    assert "wrong: wrong: got" in printed and "fails: HTTP 500: engine failed" in printed
    report = json.loads(out.read_text())
    assert report["overall"]["correct"] == 1 and report["errors"] == 1
    assert report["categories"]["fake"]["items"] == 2 and report["categories"]["other"]["correct"] == 0
    assert [r["id"] for r in report["results"]] == ["echo", "wrong", "fails"]
    assert report["results"][0]["reply"] == " w w w w"


def test_min_score_fails_on_the_lower_bound(items_file):
    with FakeServer() as server:
        assert main(["quality", "--target", server.url, "--model", BASE, "--items", str(items_file),
                     "--min-score", "0.05", "--quiet"]) == ExitCode.OK
        assert main(["quality", "--target", server.url, "--model", BASE, "--items", str(items_file),
                     "--min-score", "0.5", "--quiet"]) == ExitCode.SLO_MISSED


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--items", "{missing}"], ExitCode.USAGE, "error: items file .* does not exist"),
    (["--target", "http://127.0.0.1:9"], ExitCode.FAILED, "failed: cannot reach http://127.0.0.1:9"),
    (["--model", "other"], ExitCode.FAILED, "does not serve 'other'"),
    (["--min-score", "2"], ExitCode.USAGE, "--min-score must be a fraction"),
    (["--categories", "nope"], ExitCode.USAGE, "unknown category nope"),
    (["--target", "localhost:8000"], ExitCode.USAGE, "must start with http"),
])
def test_bad_input_is_one_clear_line(items_file, tmp_path, args, code, message):
    with FakeServer() as server:
        argv = [sys.executable, "-m", "loadtest", "quality", "--target", server.url, "--model", BASE, "--quiet",
                "--items", str(items_file)]
        argv += [a.format(missing=tmp_path / "missing.jsonl") for a in args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert re.search(message, done.stderr), done.stderr

"""The rendered examples under deploy/examples/ equal a fresh render of the commands in
deploy/render-examples.sh, so the checked-in files never drift from the renderer."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from serving.manifests.command import add_render_command, cluster_stack_config, load_cluster_target
from serving.manifests.writer import render_files
from tests.unit.serving.manifests.manifest_helpers import CATALOG, REPO

SCRIPT = REPO / "deploy" / "render-examples.sh"


def _documented_commands() -> list[argparse.Namespace]:
    parser = argparse.ArgumentParser()
    add_render_command(parser.add_subparsers(dest="command"), models_dir=lambda: REPO / "models")
    commands = []
    for line in SCRIPT.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words[1:3] == ["-m", "serving.manifests"]:
            commands.append(parser.parse_args(words[3:]))
    return commands


def _drift(expected: dict[str, str], folder: Path) -> list[str]:
    """Differences between a render and a folder: missing, extra or changed files."""
    actual = {str(p.relative_to(folder)): p for p in folder.rglob("*") if p.is_file()}
    problems = [f"missing {name}" for name in sorted(expected.keys() - actual.keys())]
    problems += [f"not rendered any more: {name}" for name in sorted(actual.keys() - expected.keys())]
    problems += [f"differs: {name}" for name in sorted(expected.keys() & actual.keys())
                 if actual[name].read_text() != expected[name]]
    return problems


def _render(args: argparse.Namespace) -> dict[str, str]:
    target = load_cluster_target(REPO / args.target)
    config = cluster_stack_config(args.model, REPO / args.config if args.config else None, target, CATALOG)
    return render_files(config, target)


def test_the_script_documents_both_examples():
    outs = sorted(Path(args.out).name for args in _documented_commands())
    assert outs == ["llama-3.3-70b-instruct-h200-3x8", "smollm2-135m-instruct-cpu-local-kind"]


@pytest.mark.parametrize("args", _documented_commands(), ids=lambda a: Path(a.out).name)
def test_checked_in_example_equals_a_fresh_render(args):
    folder = REPO / args.out
    assert folder.is_dir(), f"{args.out} is missing: run deploy/render-examples.sh"
    problems = _drift(_render(args), folder)
    assert not problems, "run deploy/render-examples.sh:\n" + "\n".join(problems)


def test_drift_is_detected(tmp_path):
    """The comparison above can fail: an edited, a missing and an extra file all show."""
    args = _documented_commands()[0]
    files = _render(args)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _drift(files, tmp_path) == []
    (tmp_path / "rayservice.yaml").write_text(files["rayservice.yaml"].replace("maxReplicas: 6", "maxReplicas: 7"))
    (tmp_path / "serve-config.yaml").unlink()
    (tmp_path / "stale.yaml").write_text("")
    assert _drift(files, tmp_path) == ["missing serve-config.yaml", "not rendered any more: stale.yaml",
                                       "differs: rayservice.yaml"]

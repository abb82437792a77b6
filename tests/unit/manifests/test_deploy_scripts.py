"""The shell scripts and static files under deploy/ (syntax only: nothing is started)."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from manifest_helpers import REPO

DEPLOY = REPO / "deploy"


@pytest.mark.parametrize("script", ["bare-metal/launch.sh", "render-examples.sh"])
def test_scripts_parse(script):
    path = DEPLOY / script
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert path.stat().st_mode & 0o111, f"{script} is not executable"


def test_launch_script_without_arguments_prints_usage():
    run = subprocess.run(["bash", str(DEPLOY / "bare-metal" / "launch.sh")], capture_output=True, text=True)
    assert run.returncode == 2 and "launch.sh head" in run.stdout


def test_bare_metal_script_deploys_the_rendered_serve_config():
    text = (DEPLOY / "bare-metal" / "launch.sh").read_text()
    assert '"$SERVE" deploy "$2"' in text
    assert "--metrics-export-port" in text and "HF_HUB_OFFLINE=1" in text


@pytest.mark.parametrize("path", sorted((DEPLOY / "kind").glob("*.yaml")), ids=lambda p: p.name)
def test_static_yaml_parses(path):
    assert all(doc for doc in yaml.safe_load_all(path.read_text()))


def test_dockerfiles_copy_what_the_package_needs():
    for name in ("Dockerfile.cuda", "Dockerfile.cpu"):
        text = (DEPLOY / "docker" / name).read_text()
        for folder in ("serving", "loadtest", "models"):
            assert f"COPY {folder} ./{folder}" in text
        assert "SERVEOUT_MODELS_DIR=/opt/serveout/models" in text and "HF_HUB_OFFLINE=1" in text
        ignore = (DEPLOY / "docker" / f"{name}.dockerignore").read_text()
        assert "!serving/" in ignore and "!models/" in ignore


def test_dockerfiles_copy_only_files_that_exist():
    import re

    for name in ("Dockerfile.cuda", "Dockerfile.cpu"):
        text = (DEPLOY / "docker" / name).read_text()
        for source in re.findall(r"^COPY (\S+) ", text, re.M):
            assert (REPO / source).exists(), f"{name} copies {source}, which is not in the repository"

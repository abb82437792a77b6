"""Credentials in the rendered pods: Ray's token on every Ray container, the API keys
Secret mounted where the gateway reads its keys file."""

from __future__ import annotations

import importlib.util
from pathlib import Path, PurePosixPath

import pytest
import yaml

from serving.errors import ConfigError
from serving.manifests import render_files, render_rayservice
from serving.manifests.access import DEFAULT_KEYS_FILE
from serving.manifests.command import cluster_stack_config
from tests.unit.serving.manifests.manifest_helpers import CATALOG, REPO, cluster_config

SMOLLM = CATALOG.get("smollm2-135m-instruct")
KIND_STACK = REPO / "deploy" / "stacks" / "smollm2-135m-instruct-cpu-local-kind.yaml"


def _templates(rayservice: dict) -> dict[str, dict]:
    """Every Ray pod template: head, engine workers and (when the target has them) gateways."""
    cluster = rayservice["spec"]["rayClusterConfig"]
    groups = {g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]}
    return {"head": cluster["headGroupSpec"]["template"], "worker": groups.pop("engines"), **groups}


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


RAY_ROOT = Path(importlib.util.find_spec("ray").origin).parent


def test_ray_reads_the_auth_variables_the_pods_set():
    """The premise, read from the installed Ray 2.60 (without importing it): the mode
    variable's name, and the token loader (C++, in _raylet) reading RAY_AUTH_TOKEN."""
    setup = (RAY_ROOT / "_private" / "authentication" / "authentication_token_setup.py").read_text()
    assert 'AUTH_MODE_ENV_VAR = "RAY_AUTH_MODE"' in setup
    (raylet,) = RAY_ROOT.glob("_raylet*.so")
    assert b"Loaded authentication token from RAY_AUTH_TOKEN environment variable" in raylet.read_bytes()


def test_every_ray_container_runs_with_token_auth(config, target):
    """Without RAY_AUTH_MODE=token anyone reaching GCS or the dashboard runs code on the cluster."""
    rs = render_rayservice(config, target)
    token_ref = {"name": target.ray_token_secret, "key": "auth_token"}
    for role, template in _templates(rs).items():
        for container in template["spec"]["containers"]:
            env = _env(container)
            assert env.get("RAY_AUTH_MODE", {}).get("value") == "token", f"{role}: no token auth"
            assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == token_ref, role
    # KubeRay sends the same token to the dashboard and to the containers it adds itself
    auth = rs["spec"]["rayClusterConfig"]["authOptions"]
    assert auth == {"mode": "token", "secretName": target.ray_token_secret}


def test_no_secret_value_is_rendered(h200):
    """Keys and tokens come from Secrets the operator creates: never a literal in a file."""
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200)
    documents = [doc for name, text in render_files(config, h200).items() if name.endswith((".yaml", ".yml"))
                 for doc in yaml.safe_load_all(text)]
    assert documents and not [d for d in documents if d.get("kind") == "Secret"]
    for template in _templates(render_rayservice(config, h200)).values():
        assert "value" not in _env(template["spec"]["containers"][0])["RAY_AUTH_TOKEN"]


def _keys_volume(template: dict) -> tuple[dict, dict]:
    (mount,) = [m for m in template["spec"]["containers"][0]["volumeMounts"] if m["name"] == "api-keys"]
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "api-keys"]
    return mount, volume


def _file_in_pod(template: dict) -> PurePosixPath:
    """Where the keys file appears inside a pod: the mount's directory + the item's path."""
    mount, volume = _keys_volume(template)
    (item,) = volume["secret"]["items"]
    assert item["key"] == "keys.txt"
    return PurePosixPath(mount["mountPath"]) / item["path"]


def _keys_config(api_keys_file: str, kind):
    return cluster_config(SMOLLM, kind, gateway={"api_keys_file": api_keys_file})


@pytest.mark.parametrize("path", [str(DEFAULT_KEYS_FILE), "/var/run/serveout/team-keys"])
def test_keys_file_is_mounted_where_the_gateway_reads_it(path, kind):
    """The gateway may run on the head or any worker: every Ray pod has the file at the
    path the rendered args name, read-only, from the target's Secret."""
    target = kind.model_copy(update={"api_keys_secret": "serveout-api-keys"})
    rs = render_rayservice(_keys_config(path, target), target)
    (app,) = yaml.safe_load(rs["spec"]["serveConfigV2"])["applications"]
    in_args = PurePosixPath(app["args"]["gateway"]["api_keys_file"])
    assert in_args == PurePosixPath(path)
    for role, template in _templates(rs).items():
        assert _file_in_pod(template) == in_args, role
        mount, volume = _keys_volume(template)
        assert mount["readOnly"] is True and volume["secret"]["secretName"] == "serveout-api-keys"


def test_a_mount_that_misses_the_file_is_detected(kind):
    """The check above can fail: a mount at another directory puts the file elsewhere."""
    target = kind.model_copy(update={"api_keys_secret": "serveout-api-keys"})
    head = _templates(render_rayservice(_keys_config(str(DEFAULT_KEYS_FILE), target), target))["head"]
    _keys_volume(head)[0]["mountPath"] = "/etc/serveout"
    assert _file_in_pod(head) != DEFAULT_KEYS_FILE


def test_no_keys_volume_without_keys(kind):
    rs = render_rayservice(cluster_config(SMOLLM, kind), kind)
    for template in _templates(rs).values():
        assert "api-keys" not in {v["name"] for v in template["spec"]["volumes"]}


def test_a_target_naming_a_keys_secret_turns_keys_on(kind):
    """`serving render`: the target alone sets the keys file to where it mounts the Secret;
    a stack file's own path wins."""
    target = kind.model_copy(update={"api_keys_secret": "serveout-api-keys"})
    config = cluster_stack_config(None, KIND_STACK, target, CATALOG)
    assert PurePosixPath(str(config.gateway.api_keys_file)) == DEFAULT_KEYS_FILE
    assert cluster_stack_config(None, KIND_STACK, kind, CATALOG).gateway.api_keys_file is None


def test_a_stack_files_keys_path_and_limits_render(tmp_path, kind):
    stack = tmp_path / "stack.yaml"
    stack.write_text(KIND_STACK.read_text() + "gateway:\n  api_keys_file: /etc/keys/serveout.txt\n"
                     "  key_limits: {rpm: 600}\n")
    target = kind.model_copy(update={"api_keys_secret": "team-keys"})
    config = cluster_stack_config(None, stack, target, CATALOG)
    assert config.gateway.key_limits.rpm == 600
    head = _templates(render_rayservice(config, target))["head"]
    assert _file_in_pod(head) == PurePosixPath("/etc/keys/serveout.txt")


@pytest.mark.parametrize("path, secret, message", [
    ("/etc/serveout/api-keys/keys.txt", None, "name the Secret that holds it with the target's api_keys_secret"),
    (None, "serveout-api-keys", "gateway would need no key"),
    ("keys.txt", "serveout-api-keys", "absolute"),
    ("/keys.txt", "serveout-api-keys", "directory of its own"),
    ("/models/keys.txt", "serveout-api-keys", "mounted over /models"),
    ("/dev/keys.txt", "serveout-api-keys", "mounted over /dev/shm"),
])
def test_keys_the_pods_would_not_have_are_refused(path, secret, message, kind):
    target = kind.model_copy(update={"api_keys_secret": secret})
    config = cluster_config(SMOLLM, kind, gateway={"api_keys_file": path})
    with pytest.raises(ConfigError, match=message):
        render_files(config, target)


def test_the_rendered_file_names_the_secrets_to_create(h200, kind):
    keyed = render_files(cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200), h200)
    assert "serveout-ray-token (key auth_token" in keyed["rayservice.yaml"]
    assert "serveout-api-keys (key keys.txt" in keyed["rayservice.yaml"]
    assert "metrics-key" in keyed["rayservice.yaml"]
    open_gateway = render_files(cluster_config(SMOLLM, kind), kind)["rayservice.yaml"]
    assert "serveout-ray-token" in open_gateway and "keys.txt" not in open_gateway

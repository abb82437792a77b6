"""Credentials of a rendered deployment: Ray's token, the gateway's API keys, Prometheus' key.

* **Ray token authentication.** Every Ray container runs with ``RAY_AUTH_MODE=token``
  and ``RAY_AUTH_TOKEN`` from the target's ``ray_token_secret`` (data key
  ``auth_token``): what Ray 2.60 reads (the token comes from ``RAY_AUTH_TOKEN``, else
  the file named by ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``). GCS, the
  dashboard (job submission included), Ray Client and the nodes' RPCs then refuse
  callers without the token. The RayCluster also states ``authOptions`` (KubeRay
  >= 1.6) naming the same Secret, because KubeRay itself talks to the dashboard: it
  posts ``serveConfigV2`` and reads Serve's status there, and it adds containers of
  its own (autoscaler sidecar, the workers' ``wait-gcs-ready``) that need the token.
  Serve's HTTP proxy (the gateway's port) and Ray's metrics port are not covered by
  Ray's token: the gateway has its own API keys.
* **API keys.** ``gateway.api_keys_file`` is read inside the gateway replica, which
  may run on any Ray pod, so the target's ``api_keys_secret`` (data key ``keys.txt``)
  is mounted read-only on every Ray pod, at the file's directory. Keys never appear
  in a rendered file.
* **Prometheus' key.** With keys and ``metrics_public`` false, ``/metrics`` needs a
  key: Prometheus sends ``metrics-key`` of the same Secret as a bearer token.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from serving.config.stack import StackConfig
from serving.errors import ConfigError
from serving.manifests.target import ClusterTarget

RAY_TOKEN_KEY = "auth_token"
"""Data key of the Ray token in its Secret (fixed by KubeRay's ``authOptions.secretName``)."""
KEYS_FILE_KEY = "keys.txt"
METRICS_KEY = "metrics-key"
"""Data key of Prometheus' own API key (its line is also in the keys file)."""
DEFAULT_KEYS_FILE = PurePosixPath("/etc/serveout/api-keys/keys.txt")
"""``gateway.api_keys_file`` when the target names a keys Secret and the stack sets no path."""
API_KEYS_VOLUME = "api-keys"
SECRET_FILE_MODE = 0o444
"""Read-only for all: Secret files belong to root (without a pod ``fsGroup``, which would
also re-own the weights volume) and Ray runs as uid 1000 in the image; nothing else runs
in the container."""


def ray_auth_env(target: ClusterTarget) -> list[dict]:
    """Container env turning on Ray's token authentication, the token from the Secret."""
    return [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": target.ray_token_secret, "key": RAY_TOKEN_KEY}}},
    ]


def ray_auth_options(target: ClusterTarget) -> dict:
    """The RayCluster's ``authOptions``: KubeRay sends the same token to the dashboard."""
    return {"mode": "token", "secretName": target.ray_token_secret}


def keys_secret(config: StackConfig, target: ClusterTarget) -> str | None:
    """The Secret holding the keys file, None without API keys.

    :class:`ConfigError` when the config and the target disagree: a keys file the pods
    would not have, or a Secret the gateway would not read (it would run open).
    """
    path, secret = config.gateway.api_keys_file, target.api_keys_secret
    if path is None and secret is None:
        return None
    if secret is None:
        raise ConfigError("gateway.api_keys_file is read inside the pods: name the Secret that "
                          "holds it with the target's api_keys_secret")
    if path is None:
        raise ConfigError(f"the target mounts API keys from Secret {secret} but gateway.api_keys_file "
                          f"is not set, so the gateway would need no key: set it (serving render "
                          f"sets {DEFAULT_KEYS_FILE})")
    pod_path = PurePosixPath(str(path))
    if not pod_path.is_absolute() or pod_path.parent == PurePosixPath("/"):
        raise ConfigError(f"gateway.api_keys_file is {path}: on a cluster it is a path inside the "
                          f"pods, absolute and in a directory of its own (e.g. {DEFAULT_KEYS_FILE})")
    return secret


def metrics_key_secret(config: StackConfig, target: ClusterTarget) -> str | None:
    """The Secret whose ``metrics-key`` Prometheus must send; None when /metrics is open."""
    secret = keys_secret(config, target)
    return None if config.gateway.metrics_public else secret


@dataclass(frozen=True)
class KeysMount:
    """The keys Secret as a read-only volume at the directory of ``gateway.api_keys_file``."""

    secret: str
    file: PurePosixPath

    def volume(self) -> dict:
        return {"name": API_KEYS_VOLUME, "secret": {
            "secretName": self.secret,
            "defaultMode": SECRET_FILE_MODE,
            "items": [{"key": KEYS_FILE_KEY, "path": self.file.name}],
        }}

    def volume_mount(self) -> dict:
        return {"name": API_KEYS_VOLUME, "mountPath": str(self.file.parent), "readOnly": True}


def keys_mount(config: StackConfig, target: ClusterTarget,
               other_mounts: Iterable[str]) -> KeysMount | None:
    """The keys volume of a Ray pod, None without API keys.

    The Secret replaces the whole directory, so it must not overlap the pod's other
    mounts (``other_mounts``: weights, /dev/shm).
    """
    secret = keys_secret(config, target)
    if secret is None:
        return None
    mount = KeysMount(secret, PurePosixPath(str(config.gateway.api_keys_file)))
    folder = mount.file.parent
    for other in map(PurePosixPath, other_mounts):
        if folder.is_relative_to(other) or other.is_relative_to(folder):
            raise ConfigError(f"gateway.api_keys_file {mount.file}: its directory would be mounted "
                              f"over {other}; give the keys file a directory of its own")
    return mount

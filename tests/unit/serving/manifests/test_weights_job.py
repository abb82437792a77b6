"""The weights-preparation Job."""

from __future__ import annotations

import json
import re
import subprocess

from serving.manifests import render_weights_job
from serving.model_store import READY_MARKER
from tests.unit.serving.manifests.manifest_helpers import CATALOG, cluster_config


def _script(job: dict) -> str:
    return job["spec"]["template"]["spec"]["containers"][0]["command"][2]


def test_weights_job_for_every_spec(config, target):
    job = render_weights_job(config, target)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_HUB_OFFLINE"] == "0", "the one step allowed to download"
    mount = container["volumeMounts"][0]
    assert mount["mountPath"] == str(target.weights.mount_path) and not mount.get("readOnly")
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == target.weights.claim_name
    script = _script(job)
    subprocess.run(["bash", "-n", "-c", script], check=True)  # shell syntax
    assert f"{config.model_path}/{READY_MARKER}" in script
    source = config.model.source
    if source.kind == "huggingface":
        python = re.search(r"<<'PY'\n(.*?)\nPY\n", script, re.S).group(1)
        compile(python, "weights-job", "exec")
        assert f"repo_id={source.repo!r}" in python
        marker = re.search(r"write_text\((.*)\)$", python, re.M).group(1)
        assert json.loads(eval(marker)) == {"source": source.model_dump(mode="json")}  # noqa: S307
    else:
        assert f"serving models prepare {config.model.name}" in script
        assert script.index(".partial") < script.index(f"mv {config.model_path}.partial")


def test_hub_token_only_when_the_target_names_a_secret(h200, kind):
    gpu = render_weights_job(cluster_config(CATALOG.get("llama-3.1-8b-instruct"), h200), h200)
    cpu = render_weights_job(cluster_config(CATALOG.get("smollm2-135m-instruct"), kind), kind)
    token = lambda job: [e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]  # noqa: E731
                         if e["name"] == "HF_TOKEN"]
    assert token(gpu)[0]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}
    assert token(cpu) == []


def test_every_base_of_the_stack_is_prepared_in_its_own_folder_once(h200):
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200, gateway={"mode": "separate", "host": "0.0.0.0"},
                            more_bases=[{"model": "llama-3.1-8b-instruct",
                                         "model_path": str(h200.weights.model_path("llama-3.1-8b-instruct"))}])
    script = _script(render_weights_job(config, h200))
    subprocess.run(["bash", "-n", "-c", script], check=True)
    for base in config.bases:
        assert f"test -f {base.model_path}/{READY_MARKER}" in script
        assert f"repo_id={base.model.source.repo!r}" in script
    assert script.count("already prepared") == 2  # a prepared base is skipped, the next one still runs
    assert "exit 0" not in script

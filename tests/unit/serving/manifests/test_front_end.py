"""The front end of a rendered cluster: Serve's HAProxy settings in every Ray container,
which pods the client Service selects, the preStop drain, and the sizing of HAProxy's
threads and the routers from the target's traffic."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from serving.cluster.drain_node import add_arguments, prestop_budget_s
from serving.errors import ConfigError
from serving.cluster.ingress_env import direct_ingress_env
from serving.manifests import render_files, render_rayservice
from serving.manifests.ray_env import HARD_STOP_ENV, ROUTERS_ENV, THREADS_ENV, ray_serve_env
from serving.manifests.sizing import (
    HAPROXY_CPU_US_PER_REQUEST,
    HAPROXY_CPU_US_PER_TOKEN,
    MIN_ROUTERS_PER_NODE,
    ROUTER_CPU_US_PER_REQUEST,
    haproxy_threads,
    plan_front_end,
    routers_per_node,
)
from tests.unit.serving.manifests.manifest_helpers import CATALOG, cluster_config

LLAMA_70B = "llama-3.3-70b-instruct"


def _templates(rayservice: dict) -> dict[str, dict]:
    """Every pod template by group: ``head``, ``engines`` and, if rendered, ``gateways``."""
    cluster = rayservice["spec"]["rayClusterConfig"]
    return {"head": cluster["headGroupSpec"]["template"],
            **{g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]}}


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _ray_constants() -> str:
    """The installed Ray Serve's and Ray's constants modules, read as text (nothing imported)."""
    root = Path(importlib.util.find_spec("ray").origin).parent
    return "\n".join((root / part).read_text() for part in ("serve/_private/constants.py",
                                                            "_private/ray_constants.py"))


def test_every_ray_container_gets_the_direct_ingress_settings(config, target):
    """Serve reads them at import in every process (controller, proxies, replicas): every
    container of every group carries each one, the sized ones set for the cluster."""
    front = plan_front_end(config, target)
    templates = _templates(render_rayservice(config, target))
    for group, template in templates.items():
        (container,) = template["spec"]["containers"]
        env = _env(container)
        cpus = int(container["resources"]["limits"]["cpu"])
        assert env.items() >= ray_serve_env(config, front, cpus).items(), group
        assert direct_ingress_env(cpus).keys() <= env.keys(), group
        assert env["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
        assert env[ROUTERS_ENV] == str(front.routers_per_node)
        assert int(env[HARD_STOP_ENV]) > max(config.gateway.request_timeout_s, config.drain.timeout_s)


def test_the_settings_are_ones_ray_reads(h200):
    """Each name is read by the installed Ray Serve or Ray (a renamed setting would be ignored
    silently)."""
    constants = _ray_constants()
    config = cluster_config(CATALOG.get(LLAMA_70B), h200)
    for name in ray_serve_env(config, plan_front_end(config, h200), 8):
        assert re.search(rf'["\']{name}["\']', constants), name


def test_bare_vms_get_the_same_settings_as_the_pods(h200, tmp_path):
    """ray-env.sh, as bash sources it, exports what the engine pods' containers carry
    (the HAProxy launcher: found on the VM's PATH, here a fake one)."""
    config = cluster_config(CATALOG.get(LLAMA_70B), h200)
    files = render_files(config, h200)
    script = tmp_path / "ray-env.sh"
    script.write_text(files["ray-env.sh"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "serveout-haproxy").write_text("#!/bin/sh\n")
    (bin_dir / "serveout-haproxy").chmod(0o755)
    shown = subprocess.run([shutil.which("bash"), "-c", f"set -a; . {shlex.quote(str(script))}; env"], capture_output=True,
                           text=True, check=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}).stdout
    exported = dict(line.split("=", 1) for line in shown.splitlines() if line.startswith("RAY_SERVE_"))
    (engine,) = _templates(render_rayservice(config, h200))["engines"]["spec"]["containers"]
    pod = {k: v for k, v in _env(engine).items() if k.startswith("RAY_SERVE_")}
    assert pod.pop("RAY_SERVE_HAPROXY_BINARY_PATH") == "/usr/local/bin/serveout-haproxy"
    assert exported.pop("RAY_SERVE_HAPROXY_BINARY_PATH") == str(bin_dir / "serveout-haproxy")
    assert exported == pod


def test_the_engine_pods_are_the_front_end_in_the_direct_mode(h200, kind):
    """KubeRay's serve Service selects every ready worker pod (and the head unless excluded):
    in the direct mode the workers are the engine pods alone, and the head stays out."""
    for target, model in ((h200, LLAMA_70B), (kind, "smollm2-135m-instruct")):
        rs = render_rayservice(cluster_config(CATALOG.get(model), target), target)
        assert list(_templates(rs)) == ["head", "engines"]
        assert rs["spec"]["excludeHeadPodFromServeSvc"] is True


def test_the_head_serves_only_while_it_may_be_the_one_proxy(h200):
    """Engines that may scale to zero leave the head's HAProxy (it holds requests while a
    replica starts); gateway pods always hold a replica, so then the head stays out."""
    spec = CATALOG.get(LLAMA_70B)
    to_zero = {"enabled": True, "min_replicas": 0, "max_replicas": 2}
    direct = render_rayservice(cluster_config(spec, h200, autoscaling=to_zero), h200)
    assert "excludeHeadPodFromServeSvc" not in direct["spec"]
    separate = render_rayservice(cluster_config(spec, h200, autoscaling=to_zero, gateway={"mode": "separate"}),
                                 h200)
    assert list(_templates(separate)) == ["head", "engines", "gateways"]
    assert separate["spec"]["excludeHeadPodFromServeSvc"] is True


def _drain_args(container: dict) -> argparse.Namespace:
    """The preStop's drain command, parsed by the drain's own argument parser."""
    shell, flag, script = container["lifecycle"]["preStop"]["exec"]["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    drain, rest = script.split(" >/proc/1/fd/1 2>&1; ")
    assert rest == "ray stop"
    words = shlex.split(drain)
    assert words[:3] == ["python", "-m", "serving.cluster.drain_node"]
    return add_arguments(argparse.ArgumentParser()).parse_args(words[3:])


def test_every_pod_drains_its_node_before_it_stops(config, target):
    """The preStop drains the deployment holding the gateway (engines in the direct mode,
    gateways in the separate mode) for drain.timeout_s, and the grace period holds it."""
    assert importlib.util.find_spec("serving.cluster.drain_node") is not None
    for group, template in _templates(render_rayservice(config, target)).items():
        (container,) = template["spec"]["containers"]
        args = _drain_args(container)
        assert args.app == config.app_name
        assert args.deployment == ("engine" if config.gateway.direct else "gateway"), group
        assert args.timeout_s == config.drain.timeout_s
        grace = template["spec"]["terminationGracePeriodSeconds"]
        assert grace == prestop_budget_s(config.drain.timeout_s) > config.drain.timeout_s


def test_a_longer_drain_gets_a_longer_grace_period(h200):
    spec = CATALOG.get(LLAMA_70B)
    short, long = (render_rayservice(cluster_config(spec, h200, drain={"timeout_s": t}), h200) for t in (30, 600))
    grace = [_templates(rs)["engines"]["spec"]["terminationGracePeriodSeconds"] for rs in (short, long)]
    assert grace[0] < grace[1] and grace[1] >= 600
    assert _drain_args(_templates(long)["engines"]["spec"]["containers"][0]).timeout_s == 600


# --- sizing -------------------------------------------------------------------------


def test_haproxy_threads_carry_the_whole_peak_at_70_percent():
    per_thread_tokens = 0.7 * 1e6 / HAPROXY_CPU_US_PER_TOKEN  # tokens/s one thread carries, no requests
    assert haproxy_threads(per_thread_tokens, 0) == 1
    assert haproxy_threads(per_thread_tokens + 1, 0) == 2
    assert haproxy_threads(0, 0.7 * 1e6 / HAPROXY_CPU_US_PER_REQUEST) == 1
    assert haproxy_threads(1, 1) == 1


def test_routers_per_node_carry_the_peak_plus_a_spare():
    one_router = 0.7 * 1e6 / ROUTER_CPU_US_PER_REQUEST  # requests/s one router carries at 70 %
    assert routers_per_node(1) == MIN_ROUTERS_PER_NODE
    assert routers_per_node(0.99 * one_router) == 2  # one busy + the spare
    assert routers_per_node(1.01 * one_router) == 3
    assert routers_per_node(4.99 * one_router) == 6


def test_the_targets_peak_reaches_every_container(h200):
    """36000 tok/s at 256 tokens per request = 140.6 req/s: the rule's threads and routers."""
    config = cluster_config(CATALOG.get(LLAMA_70B), h200)
    front = plan_front_end(config, h200)
    assert front.peak_requests_per_s == pytest.approx(36000 / 256)
    assert front.haproxy_threads == haproxy_threads(36000, 36000 / 256)
    assert front.routers_per_node == routers_per_node(36000 / 256)
    for template in _templates(render_rayservice(config, h200)).values():
        env = _env(template["spec"]["containers"][0])
        assert env[THREADS_ENV] == str(front.haproxy_threads) and env[ROUTERS_ENV] == str(front.routers_per_node)


def test_a_busier_target_gets_more_routers_and_threads(h200):
    config = cluster_config(CATALOG.get(LLAMA_70B), h200)
    busy = h200.model_copy(update={"traffic": h200.traffic.model_copy(update={
        "peak_output_tokens_per_s": 360_000, "output_tokens_per_request": 64})})
    quiet, loud = plan_front_end(config, h200), plan_front_end(config, busy)
    assert loud.haproxy_threads > quiet.haproxy_threads and loud.routers_per_node > quiet.routers_per_node
    assert loud.routers_per_node > MIN_ROUTERS_PER_NODE  # not the local stack's default
    for template in _templates(render_rayservice(config, busy)).values():
        env = _env(template["spec"]["containers"][0])
        assert env[ROUTERS_ENV] == str(loud.routers_per_node)
        assert env[THREADS_ENV] == str(min(loud.haproxy_threads, int(
            template["spec"]["containers"][0]["resources"]["limits"]["cpu"])))


def test_without_a_peak_ray_and_the_pods_own_defaults_stand(kind):
    config = cluster_config(CATALOG.get("smollm2-135m-instruct"), kind)
    front = plan_front_end(config, kind)
    assert (front.haproxy_threads, front.routers_per_node) == (None, MIN_ROUTERS_PER_NODE)
    (container,) = _templates(render_rayservice(config, kind))["engines"]["spec"]["containers"]
    cpus = int(container["resources"]["limits"]["cpu"])
    assert _env(container)[THREADS_ENV] == direct_ingress_env(cpus)[THREADS_ENV]
    assert "not sized" in render_files(config, kind)["rayservice.yaml"]


def test_the_separate_mode_sizes_haproxy_but_runs_no_routers_to_size(h200):
    config = cluster_config(CATALOG.get(LLAMA_70B), h200, gateway={"mode": "separate"})
    front = plan_front_end(config, h200)
    assert front.haproxy_threads is not None and front.routers_per_node == MIN_ROUTERS_PER_NODE
    assert front.replica_tokens_per_s is None


def test_a_pod_too_small_for_its_haproxy_threads_is_refused(h200):
    flood = h200.model_copy(update={"traffic": h200.traffic.model_copy(update={
        "peak_output_tokens_per_s": 1e9})})
    with pytest.raises(ConfigError, match="HAProxy needs"):
        plan_front_end(cluster_config(CATALOG.get(LLAMA_70B), flood), flood)


def test_the_rendered_file_states_the_sizing_and_the_replicas_streaming_load(h200):
    """The replica's own event loop streams its share of the peak in the direct mode: the
    note shows how much of a core that is and warns past 70 %."""
    text = render_files(cluster_config(CATALOG.get(LLAMA_70B), h200, replicas={"num_replicas": 6}),
                        h200)["rayservice.yaml"]
    front = plan_front_end(cluster_config(CATALOG.get(LLAMA_70B), h200, replicas={"num_replicas": 6}), h200)
    assert f"= {front.haproxy_threads} threads" in text and f"= {front.routers_per_node} per node" in text
    assert "Each engine replica streams 6000 tok/s itself" in text
    assert ("raise engine.stream_interval" in text) is (front.replica_core_share > 0.7)


def test_the_local_clusters_hard_stop_is_the_default_stacks(config):
    """``serving up`` passes its stack's own figure; a cluster started without one (the
    tests, the sweep) uses the default stack's, which must not drift from it."""
    from serving.cluster.ingress_env import DEFAULT_HARD_STOP_AFTER_S, hard_stop_after
    from serving.cluster.local import ClusterOptions

    default_config = config.model_copy(update={"gateway": type(config.gateway)(), "drain": type(config.drain)()})
    assert DEFAULT_HARD_STOP_AFTER_S == hard_stop_after(default_config)
    assert ClusterOptions().hard_stop_after_s == int(direct_ingress_env(2)[HARD_STOP_ENV]) == DEFAULT_HARD_STOP_AFTER_S

"""`serving render` (here as `python -m serving.manifests render`) and the cluster StackConfig."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from serving.errors import ConfigError
from serving.manifests.__main__ import main
from serving.manifests.command import cluster_stack_config, load_cluster_target
from serving.manifests.naming import GATEWAY_RESOURCE
from tests.unit.serving.manifests.manifest_helpers import CATALOG, REPO, TARGETS

KIND = TARGETS / "cpu-local-kind.yaml"


def test_model_path_comes_from_the_targets_volume(tmp_path):
    stack = tmp_path / "stack.yaml"
    stack.write_text("model: smollm2-135m-instruct\nmodel_path: /somewhere/else\n"
                     "replicas: {cpus_per_rank: 2}\nengine: {max_num_seqs: 8}\n")
    config = cluster_stack_config(None, stack, load_cluster_target(KIND), CATALOG)
    assert config.model_path == Path("/models/smollm2-135m-instruct")
    assert config.gateway.host == "0.0.0.0"
    assert config.engine_settings.max_num_seqs == 8  # stack file over the spec's engine settings
    assert config.engine_settings.kv_cache_space_gib == CATALOG.get("smollm2-135m-instruct").engine.kv_cache_space_gib


def test_model_flag_wins_and_defaults_apply():
    target = load_cluster_target(TARGETS / "h200-3x8.yaml")
    config = cluster_stack_config("llama-3.1-8b-instruct", None, target, CATALOG)
    assert config.model.name == "llama-3.1-8b-instruct"
    assert config.model_path == Path("/models/llama-3.1-8b-instruct")


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(ConfigError, match="smollm2-135m-instruct"):
        cluster_stack_config("nope", None, load_cluster_target(KIND), CATALOG)


def test_render_writes_every_file(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["render", "--model", "llama-3.1-8b-instruct", "--target", str(TARGETS / "h200-3x8.yaml"),
                 "--out", str(out)])
    assert code == 0
    written = capsys.readouterr().out.split()
    assert sorted(written) == sorted(str(p) for p in out.rglob("*") if p.is_file())
    docs = list(yaml.safe_load_all((out / "prometheus" / "operator.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["PodMonitor", "PodMonitor", "PrometheusRule"]
    assert json.loads((out / "grafana" / "serveout-dashboard.json").read_text())["panels"]
    assert yaml.safe_load((out / "rayservice.yaml").read_text())["kind"] == "RayService"


def test_render_refuses_what_cannot_run_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["render", "--model", "smollm2-135m-instruct", "--target", str(KIND), "--out", str(out)])
    assert code == 2
    assert "cpus_per_rank" in capsys.readouterr().err
    assert not out.exists()


def test_render_via_a_cli_that_owns_the_subparsers(tmp_path):
    """What `serving` gets: add_render_command on its own parser, models_dir from the CLI."""
    import argparse

    from serving.manifests import add_render_command

    parser = argparse.ArgumentParser(prog="serving")
    sub = parser.add_subparsers(dest="command", required=True)
    add_render_command(sub, models_dir=lambda: REPO / "models")
    args = parser.parse_args(["render", "--config", str(REPO / "deploy/stacks/smollm2-135m-instruct-cpu-local-kind.yaml"),
                              "--target", str(KIND), "--out", str(tmp_path)])
    assert args.func(args) == 0
    assert (tmp_path / "rayservice.yaml").is_file()


def test_a_target_with_a_keda_section_is_refused_in_one_line(tmp_path, capsys):
    """KEDA scales through /scale, which RayService lacks: the old section must not render."""
    target = yaml.safe_load(KIND.read_text())
    target["keda"] = {"scale_target": {"api_version": "ray.io/v1", "kind": "RayService", "name": "x"}}
    path = tmp_path / "target.yaml"
    path.write_text(yaml.safe_dump(target))
    stack = REPO / "deploy/stacks/smollm2-135m-instruct-cpu-local-kind.yaml"
    code = main(["render", "--config", str(stack), "--target", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "keda section was removed" in err and "/scale" in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


H200 = TARGETS / "h200-3x8.yaml"


def _with_gateways(tmp_path, traffic: dict | None = None, **gateways) -> Path:
    """The checked-in H200 target with another ``gateways`` (and ``traffic``) section."""
    target = yaml.safe_load(H200.read_text())
    target["gateways"] = gateways
    if traffic is not None:
        target["traffic"] = traffic
    path = tmp_path / "target.yaml"
    path.write_text(yaml.safe_dump(target))
    return path


def _stack(tmp_path, text: str = "gateway: {mode: separate}\n") -> Path:
    stack = tmp_path / "stack.yaml"
    stack.write_text(text)
    return stack


def test_the_direct_mode_is_the_default_on_a_cluster():
    config = cluster_stack_config("llama-3.1-8b-instruct", None, load_cluster_target(H200), CATALOG)
    assert config.gateway.direct
    assert config.gateway.ray_resources == {} and config.gateway.replicas == 1, "no gateway pods to pin to"


def test_the_targets_peak_sizes_the_gateways_unless_the_stack_says(tmp_path):
    """Z = ceil(Y / (0.7 x X)) + 1 gateways for the target's peak; the stack file's own count wins."""
    target = load_cluster_target(_with_gateways(tmp_path, traffic={"peak_output_tokens_per_s": 3000},
                                                tokens_per_core=400))
    sized = cluster_stack_config("llama-3.1-8b-instruct", _stack(tmp_path), target, CATALOG)
    assert sized.gateway.replicas == 12  # 3000 / 280 = 10.7 -> 11, + 1
    own = _stack(tmp_path, "gateway: {mode: separate, replicas: 3}\n")
    assert cluster_stack_config("llama-3.1-8b-instruct", own, target, CATALOG).gateway.replicas == 3
    unsized = load_cluster_target(_with_gateways(tmp_path, traffic={}, cpus=2))
    assert cluster_stack_config("llama-3.1-8b-instruct", _stack(tmp_path), unsized, CATALOG).gateway.replicas == 1


def test_the_peak_may_still_be_stated_in_the_gateways_section(tmp_path):
    """Targets written before ``traffic:`` keep rendering; a second, different peak is refused."""
    old = load_cluster_target(_with_gateways(tmp_path, traffic={}, peak_output_tokens_per_s=3000,
                                             tokens_per_core=400))
    assert old.traffic.peak_output_tokens_per_s == 3000
    assert cluster_stack_config("llama-3.1-8b-instruct", _stack(tmp_path), old, CATALOG).gateway.replicas == 12
    with pytest.raises(ConfigError, match="state the peak once"):
        load_cluster_target(_with_gateways(tmp_path, peak_output_tokens_per_s=3000))  # traffic says 36000


def test_the_rendered_serve_config_carries_the_sized_gateways(tmp_path, capsys):
    """What the cluster runs (serveConfigV2's args, the bare-metal Serve config) and the pods
    that hold it agree with the sizing rule."""
    target = _with_gateways(tmp_path, traffic={"peak_output_tokens_per_s": 1000}, tokens_per_core=500, cpus=3)
    out = tmp_path / "out"
    assert main(["render", "--model", "llama-3.1-8b-instruct", "--config", str(_stack(tmp_path)),
                 "--target", str(target), "--out", str(out)]) == 0
    capsys.readouterr()
    rayservice = yaml.safe_load((out / "rayservice.yaml").read_text())
    args = yaml.safe_load(rayservice["spec"]["serveConfigV2"])["applications"][0]["args"]
    bare_metal = yaml.safe_load((out / "serve-config.yaml").read_text())["applications"][0]["args"]
    assert args["gateway"]["replicas"] == bare_metal["gateway"]["replicas"] == 4  # 1000 / 350 -> 3, + 1
    (group,) = [g for g in rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
                if g["groupName"] == "gateways"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 4
    (container,) = group["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"] == container["resources"]["limits"]["cpu"] == "3"
    assert "= 4 for the target's peak" in (out / "rayservice.yaml").read_text()


def _rendered(out: Path) -> tuple[dict, dict, dict]:
    """(serveConfigV2's args, the bare-metal Serve config's args, rayStartParams by group)."""
    rayservice = yaml.safe_load((out / "rayservice.yaml").read_text())
    cluster = rayservice["spec"]["rayClusterConfig"]
    params = {"head": cluster["headGroupSpec"]["rayStartParams"],
              **{g["groupName"]: g["rayStartParams"] for g in cluster["workerGroupSpecs"]}}
    args = yaml.safe_load(rayservice["spec"]["serveConfigV2"])["applications"][0]["args"]
    bare_metal = yaml.safe_load((out / "serve-config.yaml").read_text())["applications"][0]["args"]
    return args, bare_metal, params


def test_a_target_with_gateway_pods_pins_the_gateway_replicas_to_them(tmp_path, capsys):
    """Each replica asks for the resource (on KubeRay and on VMs); only the gateway pods offer it."""
    out = tmp_path / "out"
    assert main(["render", "--model", "llama-3.1-8b-instruct", "--config", str(_stack(tmp_path)),
                 "--target", str(H200), "--out", str(out)]) == 0
    capsys.readouterr()
    args, bare_metal, params = _rendered(out)
    assert args["gateway"]["ray_resources"] == bare_metal["gateway"]["ray_resources"] == {GATEWAY_RESOURCE: 1}
    assert {group: p.get("resources") for group, p in params.items()} == {
        "head": None, "engines": None, "gateways": '"{\\"serveout_gateway\\": 1}"'}
    assert "GATEWAYS=N offers serveout_gateway" in (out / "serve-config.yaml").read_text()


@pytest.mark.parametrize("own", [{"fast_nic": 2.0}, {}])
def test_the_stack_files_own_gateway_resources_win_whole(tmp_path, own):
    """Not merged with the default: a stack asking for another resource (or none) gets just that."""
    stack = _stack(tmp_path, yaml.safe_dump({"gateway": {"mode": "separate", "ray_resources": own}}))
    config = cluster_stack_config("llama-3.1-8b-instruct", stack, load_cluster_target(H200), CATALOG)
    assert config.gateway.ray_resources == own


def test_without_gateway_pods_the_gateways_ask_for_no_resource(tmp_path, capsys):
    out = tmp_path / "out"
    stack = REPO / "deploy/stacks/smollm2-135m-instruct-cpu-local-kind.yaml"
    assert main(["render", "--config", str(stack), "--target", str(KIND), "--out", str(out)]) == 0
    capsys.readouterr()
    args, bare_metal, params = _rendered(out)
    assert args["gateway"]["ray_resources"] == bare_metal["gateway"]["ray_resources"] == {}
    assert list(params) == ["head", "engines"] and not [p for p in params.values() if "resources" in p]
    assert "GATEWAYS" not in (out / "serve-config.yaml").read_text()


def test_the_direct_mode_renders_no_gateway_pods_and_says_why(tmp_path, capsys):
    """The target's gateway pods serve the separate mode; a direct-mode stack gets none (and no
    resource pinning its routers to pods nobody offers)."""
    out = tmp_path / "out"
    assert main(["render", "--model", "llama-3.1-8b-instruct", "--target", str(H200), "--out", str(out)]) == 0
    capsys.readouterr()
    args, bare_metal, params = _rendered(out)
    assert args["gateway"]["mode"] == bare_metal["gateway"]["mode"] == "direct"
    assert args["gateway"]["ray_resources"] == {} and list(params) == ["head", "engines"]
    assert "gateway pods (gateways:) are for gateway.mode separate" in (out / "rayservice.yaml").read_text()


def test_routers_pinned_to_a_resource_are_refused_in_one_line(tmp_path, capsys):
    """In the direct mode gateway.ray_resources would pin the routers, which Ray places on
    every proxy node: no pod offers the resource, so every request would fail."""
    stack = _stack(tmp_path, "gateway: {ray_resources: {serveout_gateway: 1}}\n")
    out = tmp_path / "out"
    code = main(["render", "--model", "llama-3.1-8b-instruct", "--config", str(stack), "--target", str(H200),
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "pins the routers" in err and err.count("\n") == 1
    assert not out.exists()

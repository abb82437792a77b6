"""`serving render` (here as `python -m serving.manifests render`) and the cluster StackConfig."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from serving.errors import ConfigError
from serving.manifests.__main__ import main
from serving.manifests.command import cluster_stack_config, load_cluster_target
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

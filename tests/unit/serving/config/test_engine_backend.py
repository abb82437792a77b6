"""Choosing the engine behind the replicas: vLLM (default) or the null engine."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from serving.cli import build_parser, stack_config_from_args
from serving.config.loading import build_stack_config, read_stack_file
from serving.config.adapters import AdapterSpec
from serving.config.model_spec import ModelCatalog
from serving.config.stack import NullBackend, VllmBackend
from serving.errors import ConfigError
from tests.paths import MODELS  # noqa: E402

CATALOG = ModelCatalog(MODELS)


def build(data):
    return build_stack_config(data, catalog=CATALOG, resolve_path=lambda n: Path("/m") / n)


def from_cli(argv, config_file=None):
    args = build_parser().parse_args(["up", *argv, *(["--config", str(config_file)] if config_file else [])])
    # a fake model store: weights and adapters at made-up paths (nothing is read)
    store = SimpleNamespace(catalog=CATALOG, require=lambda n: Path("/m") / n,
                            adapters=SimpleNamespace(spec=lambda spec, name: AdapterSpec(name=name, path=Path("/a") / name)))
    return stack_config_from_args(args, store)


def test_vllm_is_the_default_and_reaches_the_replica_config():
    config = build({})
    assert config.engine_backend == VllmBackend()
    assert config.engine_replica_config().backend == VllmBackend()
    assert build({"engine_backend": {}}).engine_backend == VllmBackend()


def test_the_null_engine_and_its_pace_reach_the_replica_config():
    config = build({"engine_backend": {"kind": "null", "tokens_per_s": 50, "ttft_s": 0.1},
                    "engine": {"max_num_seqs": 128}})
    backend = config.engine_replica_config().backend
    assert backend == NullBackend(tokens_per_s=50, ttft_s=0.1)
    assert config.engine_replica_config().engine.max_num_seqs == 128  # the null engine's cap
    assert NullBackend().tokens_per_s == 0 and NullBackend().token_text == " tok"


def test_an_unknown_kind_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        build({"engine_backend": {"kind": "sglang"}})
    assert "'vllm'" in str(err.value) and "'null'" in str(err.value)


@pytest.mark.parametrize("bad", [{"tokens_per_s": -1}, {"ttft_s": -0.5}, {"tokens_per_s": float("nan")},
                                 {"ttft_s": float("inf")}, {"token_text": ""}])
def test_negative_or_non_finite_pace_is_rejected(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        build({"engine_backend": {"kind": "null", **bad}})


def test_null_engine_knobs_on_the_vllm_engine_are_an_error():
    with pytest.raises(ConfigError, match="tokens_per_s"):
        build({"engine_backend": {"kind": "vllm", "tokens_per_s": 5}})


def test_a_stack_file_may_write_kind_null_unquoted(tmp_path):
    path = tmp_path / "stack.yaml"
    path.write_text("engine_backend: {kind: null, tokens_per_s: 20}\n")  # YAML reads null as None
    assert build(read_stack_file(path)).engine_backend == NullBackend(tokens_per_s=20)


def test_the_cli_selects_the_null_engine_and_converts_milliseconds():
    config = from_cli(["--engine", "null", "--null-tokens-per-s", "40", "--null-ttft-ms", "250"])
    assert config.engine_backend == NullBackend(tokens_per_s=40, ttft_s=0.25)
    assert from_cli([]).engine_backend == VllmBackend()


def test_cli_pace_flags_override_a_stack_file_that_chose_the_null_engine(tmp_path):
    path = tmp_path / "stack.yaml"
    path.write_text("engine_backend: {kind: 'null', tokens_per_s: 20, ttft_s: 0.5}\n")
    assert from_cli(["--null-tokens-per-s", "80"], path).engine_backend == NullBackend(tokens_per_s=80, ttft_s=0.5)


def test_cli_pace_flags_without_the_null_engine_are_an_error():
    with pytest.raises(ConfigError, match="tokens_per_s"):
        from_cli(["--null-tokens-per-s", "80"])
    with pytest.raises(ConfigError, match="tokens_per_s"):
        from_cli(["--engine", "vllm", "--null-tokens-per-s", "80"])


def test_the_cli_refuses_an_unknown_engine(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["up", "--engine", "sglang"])
    assert exit_.value.code == 2 and "'vllm', 'null'" in capsys.readouterr().err

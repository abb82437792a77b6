"""What an adapter folder must be before an engine loads it: real PEFT-shaped folders
(adapter_config.json and a safetensors file written here) against a tiny Llama config."""

import pytest

from serving.adapters.checks import WEIGHTS_FILE, check_adapter, safetensors_shapes
from serving.config.adapters import AdapterSpec
from serving.errors import AdapterLoadError, ConfigError
from tests.unit.serving.adapters.peft_folders import BASE, adapter, lora_weights, write_safetensors


def refusal(spec: AdapterSpec, max_lora_rank: int = 16) -> str:
    with pytest.raises(AdapterLoadError) as caught:
        check_adapter(spec, max_lora_rank=max_lora_rank, base_config=BASE)
    assert isinstance(caught.value, ConfigError)  # one exception tree
    assert repr(spec.name) in str(caught.value)
    return str(caught.value)


def test_a_good_adapter_gives_its_rank_and_rank_pattern_counts(tmp_path):
    assert check_adapter(adapter(tmp_path), max_lora_rank=16, base_config=BASE) == 8
    patterned = adapter(tmp_path, {"rank_pattern": {"q_proj": 16}}, name="patterned")
    assert check_adapter(patterned, max_lora_rank=16, base_config=BASE) == 16


def test_the_header_gives_every_shape(tmp_path):
    write_safetensors(tmp_path / "w.safetensors", {"a": [2, 3], "b": [4, 1]})
    assert safetensors_shapes(tmp_path / "w.safetensors") == {"a": [2, 3], "b": [4, 1]}


@pytest.mark.parametrize("config, reason", [
    ({"peft_type": "IA3"}, "peft_type IA3 is not LORA"),
    ({"use_dora": True}, "DoRA"),
    ({"bias": "all"}, "bias terms"),
    ({"lora_bias": True}, "bias terms"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"r": 32}, "rank 32 is above the engine's max_lora_rank 16"),
    ({"rank_pattern": {"v_proj": 64}}, "rank 64"),
])
def test_formats_vllm_rejects_are_refused_with_the_reason(tmp_path, config, reason):
    assert reason in refusal(adapter(tmp_path, config))


def test_missing_folder_config_or_weights_are_refused(tmp_path):
    assert "does not exist" in refusal(AdapterSpec(name="gone", path=tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    assert "no readable adapter_config.json" in refusal(AdapterSpec(name="empty", path=tmp_path / "empty"))
    assert f"no {WEIGHTS_FILE}" in refusal(adapter(tmp_path, weights=False, name="noweights"))


@pytest.mark.parametrize("weights, reason", [
    (lora_weights(layers=3), "is for layer 2, the base has 2"),
    (lora_weights(q_in=96), "has 96 features where the base's q_proj has 64"),
    (lora_weights(down_out=80), "has 80 features where the base's down_proj has 64"),
])
def test_an_adapter_made_for_another_base_is_refused(tmp_path, weights, reason):
    message = refusal(adapter(tmp_path, weights=weights))
    assert "made for another base model" in message and reason in message

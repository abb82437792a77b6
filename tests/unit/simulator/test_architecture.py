"""The model specs' architecture section: public figures, derived counts, random-init sizes."""

import pytest

from serving.config.model_spec import ModelCatalog, ModelSpec
from tests.paths import MODELS


@pytest.mark.parametrize(("name", "billions"), [("llama-3.1-8b-instruct", 8.03), ("llama-3.3-70b-instruct", 70.55),
                                                ("smollm2-135m-instruct", 0.1345)])
def test_parameter_counts_match_the_published_sizes(name, billions):
    arch = ModelCatalog(MODELS).get(name).architecture
    assert arch.parameter_count / 1e9 == pytest.approx(billions, rel=0.005)


def test_a_random_init_model_takes_its_sizes_from_its_source():
    spec = ModelCatalog(MODELS).get("tiny-llama-tp2-test")
    assert spec.architecture.hidden_size == spec.source.hidden_size
    assert spec.architecture.num_hidden_layers == spec.source.num_hidden_layers
    assert spec.architecture.resolved_head_dim == spec.source.hidden_size // spec.source.num_attention_heads


def test_an_architecture_contradicting_its_random_init_source_is_refused():
    data = ModelCatalog(MODELS).get("tiny-llama-tp2-test").model_dump(mode="json")
    data["architecture"] = {"vocab_size": 100, "hidden_size": 512}
    with pytest.raises(ValueError, match="hidden_size"):
        ModelSpec.model_validate(data)

"""The request's ``model`` names the base model or one of its adapters."""

import pytest

from serving.errors import ModelNotFoundError
from serving.openai.validation import check_model

BASE = "smollm2-135m-instruct"


def test_the_base_is_no_adapter_and_an_adapter_is_itself():
    assert check_model(BASE, BASE, ("clinic", "pharmacy")) is None
    assert check_model("pharmacy", BASE, ("clinic", "pharmacy")) == "pharmacy"


def test_an_unknown_name_is_not_found_listing_every_served_model():
    with pytest.raises(ModelNotFoundError) as caught:
        check_model("Clinic", BASE, ("clinic", "pharmacy"))
    assert caught.value.param == "model"
    assert str(caught.value).endswith(f"Served models: {BASE}, clinic, pharmacy")

"""Unit-test fixtures: the real tokenizer of the default model (prepared by set-up)."""

from pathlib import Path

import pytest

from serving.config.model_spec import ModelCatalog
from serving.model_store import ModelStore
from tests.paths import MODELS  # noqa: E402


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    return ModelStore(ModelCatalog(MODELS)).require("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tokenizer(default_model_path):
    from serving.openai.tokenization import PromptTokenizer

    return PromptTokenizer(default_model_path)

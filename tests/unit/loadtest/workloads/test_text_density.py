"""Tokens per character: exact counts with a fake word tokenizer and the committed tiny
tokenizer; Vietnamese against English with the default model's tokenizer when it is
prepared (else the tiny one, trained on the English sets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.errors import WorkloadError
from loadtest.workloads import BundledPrompts, RandomWorkload
from loadtest.workloads.files import BUNDLED
from loadtest.workloads.text_density import (
    TextDensity,
    language_densities,
    language_of,
    measure_densities,
    measure_text_density,
    pooled,
    prompt_set_texts,
    set_densities,
    workload_density,
)
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer
from tests.fixtures import TINY_TOKENIZER


class FakeWordTokenizer:
    """FAKE tokenizer: one token per whitespace-separated word."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(range(len(text.split())))


def real_or_tiny_tokenizer() -> Path:
    """The default model's tokenizer if `serving models prepare` made it, else the tiny one."""
    path = default_tokenizer_path("smollm2-135m-instruct")
    return path if (path / "tokenizer.json").is_file() else TINY_TOKENIZER


def file_prompts(name: str) -> list[str]:
    lines = (BUNDLED / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["prompt"] for line in lines if line.strip()]


def test_density_by_hand_with_a_word_tokenizer():
    d = measure_text_density(["xin chào", "hello"], FakeWordTokenizer(), name="mix", language="vi")
    assert (d.prompts, d.characters, d.tokens) == (2, 13, 3)  # "xin chào" is 8 code points
    assert d.tokens_per_char == pytest.approx(3 / 13) and d.chars_per_token == pytest.approx(13 / 3)


def test_empty_text_has_no_ratios():
    d = measure_text_density([""], FakeWordTokenizer(), name="none", language="en")
    assert (d.characters, d.tokens, d.tokens_per_char, d.chars_per_token) == (0, 0, None, None)


def test_a_letter_the_tiny_tokenizer_never_saw_costs_a_token_per_utf8_byte():
    tiny = load_tokenizer(TINY_TOKENIZER)  # trained on the English sets only
    d = measure_text_density(["ữ"], tiny, name="one letter", language="vi")
    assert (d.characters, d.tokens) == (1, len("ữ".encode())) == (1, 3)


def test_pooling_sums_and_groups_by_language():
    sets = (
        TextDensity(name="en-a", language="en", prompts=2, characters=100, tokens=20),
        TextDensity(name="vi-a", language="vi", prompts=1, characters=50, tokens=40),
        TextDensity(name="en-b", language="en", prompts=3, characters=300, tokens=60),
    )
    en, vi = language_densities(sets)
    assert en == TextDensity(name="en", language="en", prompts=5, characters=400, tokens=80)
    assert vi == TextDensity(name="vi", language="vi", prompts=1, characters=50, tokens=40)
    assert pooled(sets, name="all", language="*").tokens_per_char == pytest.approx(120 / 450)
    assert language_of("vi-health-admin") == "vi" and language_of("en") == "en"


def test_a_bundled_set_is_measured_over_every_prompt_of_its_file():
    assert list(prompt_set_texts("vi-questions")) == file_prompts("vi-questions")
    (d,) = set_densities(FakeWordTokenizer(), ["vi-questions"])
    texts = file_prompts("vi-questions")
    assert (d.name, d.language, d.prompts) == ("vi-questions", "vi", len(texts))
    assert d.characters == sum(len(t) for t in texts)
    assert d.tokens == sum(len(t.split()) for t in texts)


def test_workload_density_pools_its_sets_and_is_none_for_synthetic_text():
    fake = FakeWordTokenizer()
    d = workload_density(BundledPrompts(sets=("vi-questions", "en-questions")), fake)
    assert d is not None and (d.name, d.language) == ("vi-questions,en-questions", "en+vi")
    assert d.characters == sum(len(t) for s in ("vi-questions", "en-questions") for t in file_prompts(s))
    assert workload_density(RandomWorkload(input_len=8), fake) is None
    assert workload_density(None, fake) is None


def test_vietnamese_costs_more_tokens_per_character_than_english_with_the_models_tokenizer():
    densities = measure_densities(real_or_tiny_tokenizer(), BundledPrompts(sets=("vi-summarise",)))
    en, vi = densities.language("en"), densities.language("vi")
    assert en is not None and vi is not None and densities.language("fr") is None
    assert en.prompts == sum(len(file_prompts(s)) for s in ("en-questions", "en-summarise", "en-health-admin"))
    # SmolLM2's tokenizer: ~0.20 tokens/char in English, ~0.79 in Vietnamese
    assert vi.tokens_per_char > 2 * en.tokens_per_char
    assert densities.workload is not None and densities.workload.language == "vi"


def test_no_tokenizer_in_the_folder_is_a_workload_error(tmp_path: Path):
    with pytest.raises(WorkloadError, match="no tokenizer in"):
        measure_densities(tmp_path)

"""Cost per request and per character next to cost per million tokens: the maths by hand,
run rows, the report's language view (JSON and Markdown), and Vietnamese against
English with the default model's tokenizer when it is prepared (else the tiny one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.workloads.text_density import TextDensities, TextDensity, measure_densities
from serving.config.model_spec import AcceleratorKind, ModelCatalog
from serving.model_store import ModelStore
from sweep.analysis.rows import build_rows
from sweep.measure.results import Trial
from sweep.report.document import ReportStatus, SweepReport, build_report
from sweep.report.markdown import render_markdown
from sweep.spec.economics import cost_per_million_chars, cost_per_million_tokens, cost_per_request
from sweep.spec.space import DeploymentCandidate, SearchSpace
from tests.fixtures import TINY_TOKENIZER
from tests.paths import MODELS
from tests.unit.sweep.sweep_fakes import PRICES, failing_point, fixed_clock, make_spec, passing_point, record

EN = TextDensity(name="en", language="en", prompts=4, characters=400, tokens=100)  # 4 chars/token
VI = TextDensity(name="vi", language="vi", prompts=4, characters=100, tokens=80)  # 1.25 chars/token
DENSITIES = TextDensities(tokenizer="test-tokenizer", languages=(EN, VI))


def default_model_tokenizer() -> Path:
    """The default model's folder if it is prepared here, else the tiny test tokenizer."""
    store = ModelStore(ModelCatalog(MODELS))
    name = "smollm2-135m-instruct"
    return store.path(name) if store.is_ready(name) else TINY_TOKENIZER


def test_cost_per_request_and_per_million_characters_by_hand():
    # 4 $/h at 10 req/s: 36,000 requests an hour -> 1/9,000 $ each
    assert cost_per_request(4.0, 10.0) == pytest.approx(1 / 9000)
    assert cost_per_request(4.0, 0.0) is None
    # 2 $ per million tokens at 4 characters per token: 0.5 $ per million characters
    assert cost_per_million_chars(2.0, 4.0) == pytest.approx(0.5)
    assert cost_per_million_chars(2.0, 1.25) == pytest.approx(1.6)
    assert cost_per_million_chars(None, 4.0) is None and cost_per_million_chars(2.0, None) is None
    with pytest.raises(ValueError):
        cost_per_million_chars(2.0, 0.0)


def one_run(chars_per_token: float | None):
    spec = make_spec(rate=10.0, tp=(1,))  # H200 at 4 $/h
    space = SearchSpace(spec, PRICES)
    run = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(10.0,)), passing_point(10.0))
    (row,) = build_rows(space, [run], chars_per_token)
    return row


def test_run_rows_carry_cost_per_request_and_per_character_at_the_target():
    row = one_run(chars_per_token=4.0)
    per_million = cost_per_million_tokens(4.0, 10.0 * 100)  # 10 req/s x 100 tokens
    assert row.cost_per_million_output_tokens == pytest.approx(per_million)
    assert row.cost_per_request == pytest.approx(4.0 / (10.0 * 3600))
    assert row.cost_per_million_output_chars == pytest.approx(per_million / 4.0)
    synthetic = one_run(chars_per_token=None)
    assert synthetic.cost_per_million_output_chars is None and synthetic.cost_per_request == row.cost_per_request


def test_a_run_without_a_target_point_has_no_costs_per_unit():
    spec = make_spec(rate=10.0, tp=(1,))
    space = SearchSpace(spec, PRICES)
    probe = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(5.0,)), failing_point(5.0))
    (row,) = build_rows(space, [probe], 4.0)
    assert row.cost_per_request is None and row.cost_per_million_output_chars is None


def report_of(text_density: TextDensities | None) -> SweepReport:
    spec = make_spec(rate=10.0, tp=(1,))
    space = SearchSpace(spec, PRICES)
    run = record(Trial(candidate=DeploymentCandidate(tp=1, replicas=1), offered_rates=(10.0,)), passing_point(10.0))
    return build_report(space, "grid", [run], status=ReportStatus.COMPLETE, generated_at=fixed_clock(),
                        text_density=text_density)


def test_the_report_prices_the_answer_per_character_in_each_language():
    report = report_of(DENSITIES)
    best = report.run(report.answer.best or "")
    assert best is not None and best.cost_per_million_output_tokens is not None
    en, vi = report.language_costs
    assert (en.language, vi.language) == ("en", "vi") and en.candidate_id == best.candidate_id
    assert en.cost_per_million_output_chars == pytest.approx(best.cost_per_million_output_tokens / 4.0)
    assert vi.cost_per_million_output_chars == pytest.approx(best.cost_per_million_output_tokens / 1.25)
    assert best.cost_per_million_output_chars is None  # the spec's workload is synthetic
    assert SweepReport.model_validate_json(report.model_dump_json()) == report


def test_markdown_shows_the_language_table_and_says_synthetic_text_has_no_language():
    text = render_markdown(report_of(DENSITIES))
    assert "## Cost per character" in text
    assert "Workload `random`: synthetic token strings in no language" in text
    # vi: 0.8 tokens/char against en's 0.25 -> 3.20x
    assert "| vi | 4 | 100 | 80 | 0.8 | 1.25 | 3.20x |" in text
    assert "| en | 4 | 400 | 100 | 0.25 | 4 | 1.00x |" in text
    assert "USD/request" in text and "USD/M chars" in text


def test_markdown_without_a_tokenizer_says_not_measured():
    report = report_of(None)
    assert report.language_costs == ()
    assert "Not measured: the sweep had no tokenizer" in render_markdown(report)


def test_vietnamese_costs_more_per_character_than_english_with_the_models_tokenizer():
    report = report_of(measure_densities(default_model_tokenizer()))
    costs = {c.language: c.cost_per_million_output_chars for c in report.language_costs}
    assert set(costs) == {"en", "vi"}
    # the same price per token is several times the price per character in Vietnamese
    assert costs["vi"] > 2 * costs["en"]

"""The "Per model" table of ``report.md`` and ``report.html``: there when a stage's
requests named more than one model, absent otherwise."""

from rich.console import Console

from loadtest.analysis.metrics import build_stage
from loadtest.reports import write_reports
from loadtest.reports.table import summary_renderable
from tests.unit.loadtest.reports.every_section import MODELS, every_section

HEADER = "| model | requests | share | errors | TTFT p50 (ms) | TTFT p95 (ms) | TPOT p50 (ms) | E2E p95 (ms) | output tok/s |"


def single_model(summary, records):
    """The same run with every request naming one model (no mix)."""
    records = [r.model_copy(update={"model": MODELS[0]}) for r in records]
    stages = tuple(
        build_stage([r for r in records if r.stage == s.index], plan=s.plan, window=(0.0, 10.0), timed=True,
                    objectives=summary.config.slos, started_unix=s.started_unix, offset_s=s.offset_s,
                    generator=s.generator, duration_s=10.0)
        for s in summary.stages)  # fmt: skip
    config = summary.config.model_copy(update={"model_mix": None})
    return summary.model_copy(update={"stages": stages, "config": config}), records


def console_text(summary) -> str:
    console = Console(width=200, record=True)
    console.print(summary_renderable(summary))
    return console.export_text()


def test_the_per_model_table_shows_each_model_of_each_stage(tmp_path):
    summary, records = every_section()
    write_reports(summary, records, tmp_path, ["markdown", "html"])
    markdown = (tmp_path / "report.md").read_text()
    assert "- model mix: `clinic=1,pharmacy=1,smollm2-135m-instruct=1`" in markdown
    assert markdown.count(HEADER) == len(summary.stages) == 2
    for stage in summary.stages:
        assert sorted(m.model for m in stage.models) == sorted(MODELS)
        for m in stage.models:
            row = (f"| `{m.model}` | {m.requests} | {m.share:.1%} | {m.errors} | {m.ttft.p50 * 1e3:.1f} | "
                   f"{m.ttft.p95 * 1e3:.1f} | {m.tpot.p50 * 1e3:.1f} | {m.e2e.p95 * 1e3:.1f} | "
                   f"{m.output_tokens_per_s:.1f} |")
            assert row in markdown
    page = (tmp_path / "report.html").read_text()
    assert page.count("<th>model</th>") == 2 and "<td><code>pharmacy</code></td>" in page
    assert "Per model: 3 models" in page
    assert "models" in console_text(summary) and "pharmacy" in console_text(summary)


def test_no_per_model_table_for_a_single_model(tmp_path):
    summary, records = single_model(*every_section())
    assert all(stage.models == () for stage in summary.stages)
    write_reports(summary, records, tmp_path, ["markdown", "html"])
    for name in ("report.md", "report.html"):
        text = (tmp_path / name).read_text()
        assert "Per model" not in text and "model mix" not in text, name
    assert "pharmacy" not in console_text(summary)

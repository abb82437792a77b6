"""The priority-flood benchmark's pure figures."""

from benchmarks.priority_flood import summarise


def test_a_phase_reports_ttft_in_ms_and_batch_tokens_per_second():
    phase = summarise([0.1, 0.2, 0.3, 0.4], 1, batch_tokens=600, batch_ok=10, batch_429=5, seconds=30.0,
                      interactive=True, batch=True)
    assert phase.ttft_p50_ms == 250 and 380 <= phase.ttft_p95_ms <= 400
    assert (phase.interactive_ok, phase.interactive_429, phase.batch_tok_s) == (4, 1, 20.0)


def test_a_sender_kind_that_did_not_run_has_no_figure():
    alone = summarise([0.1], 0, 0, 0, 0, 30.0, interactive=True, batch=False)
    assert alone.batch_tok_s is None and alone.ttft_p95_ms == 100
    batch = summarise([], 0, 300, 5, 0, 30.0, interactive=False, batch=True)
    assert batch.ttft_p50_ms is None and batch.batch_tok_s == 10.0

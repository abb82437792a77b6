"""Warnings a run's reader must see: invalid figures, load not delivered, odd answers (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from loadtest.analysis.summary import ServerReport, StageSummary

LOOP_LAG_WARN_S = 0.02
ERROR_RATE_WARN = 0.05
SETTLED = 0.9  # an objective verdict agreed by fewer bootstrap resamples than this is uncertain


def collect_warnings(stages: Sequence[StageSummary], server: ServerReport) -> list[str]:
    """Human-readable warnings, most serious first."""
    out: list[str] = []
    for s in stages:
        g = s.generator
        prefix = f"stage {s.index} ({s.label})" if len(stages) > 1 else "run"
        if not s.validity.valid:
            out.append(
                f"INVALID MEASUREMENT in {prefix}: {'; '.join(s.validity.reasons)}. "
                "Its figures do not describe the load it claims; its verdict is never a pass."
            )
        if g.saturated:
            out.append(
                f"LOAD GENERATOR SATURATED in {prefix}: it used {g.cpu_percent_p90:.0f}% of one core "
                "(p90 over the load); its timings are inflated and the figures are not trustworthy. "
                "Use more generator processes (--workers), fewer users, a lower rate, or a less loaded machine."
            )
        if g.loop_lag_p99_s is not None and g.loop_lag_p99_s > LOOP_LAG_WARN_S:
            out.append(
                f"{prefix}: the generator's event loop woke up late (p99 {g.loop_lag_p99_s * 1e3:.0f} ms, "
                f"max {g.loop_lag_max_s * 1e3:.0f} ms): latencies may be overstated by up to that much "
                "(CPU contention on this machine?)"
            )
        a = s.arrivals
        if a.slot_waits:
            out.append(
                f"{prefix}: the client concurrency cap ({a.max_concurrency}) was hit: {a.slot_waits} arrivals "
                "waited for a free slot; raise max_concurrency in the profile (e.g. poisson:rate=4,max_concurrency=512)"
            )
        if a.scheduled and a.late:
            cause = "every slot was busy" if a.slot_waits else "the generator fell behind"
            out.append(
                f"{prefix}: {a.late} of {a.scheduled} arrivals left more than "
                f"{a.late_threshold_s * 1e3:.0f} ms late (max lag {a.lag_max_s:.2f} s): {cause}; "
                "the offered rate was not delivered on time"
            )
        if a.dropped:
            out.append(
                f"{prefix}: {a.dropped} of {a.due} due arrivals were never sent before the duration ended "
                f"(achieved {a.achieved_rate or 0:.3g} req/s)"
            )
        for o in s.slo.objectives:
            agree = None if o.confidence is None else (o.confidence if o.passed else 1.0 - o.confidence)
            if agree is not None and agree < SETTLED:
                out.append(
                    f"{prefix}: {o.objective.key} {'passed' if o.passed else 'failed'} narrowly: "
                    f"{o.observed_text()} ({o.interval_text()}) against {o.objective.describe()}; "
                    "a longer run would settle it"
                )
        r = s.requests
        if r.measured == 0:
            out.append(f"{prefix}: no request started inside the measured window")
        elif r.error_rate is not None and r.error_rate > ERROR_RATE_WARN:
            kinds = ", ".join(f"{k.value} {v}" for k, v in r.errors.items())
            out.append(f"{prefix}: {r.error_rate:.0%} of measured requests failed ({kinds})")
        t = s.tokens
        if t.output_len_mismatches:
            out.append(
                f"{prefix}: {t.output_len_mismatches} answers had another length than requested "
                "(does the server honour ignore_eos?)"
            )
        if t.prompt_len_mismatches:
            out.append(
                f"{prefix}: {t.prompt_len_mismatches} prompts were counted differently by the server "
                "than by the local tokenizer (another tokenizer or chat template?)"
            )
        if t.unknown:
            out.append(
                f"{prefix}: {t.unknown} successful answers have no token count (TPOT and tok/s omit them; "
                "they never meet a TPOT objective in goodput)"
            )
    if server.metrics_url and server.scrapes_failed:
        out.append(f"metrics: {server.scrapes_failed} scrapes of {server.metrics_url} failed ({server.last_error})")
    if server.metrics_url and not server.timeline and server.last_error:
        out.append(f"metrics: no server timeline ({server.last_error})")
    return out

"""Warnings a run's reader must see: invalid figures, load not delivered, odd answers (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from loadtest.analysis.summary import GeneratorReport, ServerReport, StageSummary

LOOP_LAG_WARN_S = 0.02
STARVED_SHARE = 0.5  # of the worst loop lag spent waiting for a CPU: the machine's doing
ERROR_RATE_WARN = 0.05
SETTLED = 0.9  # an objective verdict agreed by fewer bootstrap resamples than this is uncertain


def starved_by_machine(g: GeneratorReport) -> bool:
    """Whether the generator's worst loop lag was mostly time spent waiting for a CPU."""
    wait, lag = g.cpu_wait_at_lag_max_s, g.loop_lag_max_s
    return wait is not None and bool(lag) and wait >= STARVED_SHARE * lag


def lag_cause(g: GeneratorReport, starved: bool) -> str:
    if g.cpu_wait_at_lag_max_s is None:
        return "CPU contention on this machine?"
    wait = f"{g.cpu_wait_at_lag_max_s * 1e3:.0f} ms"
    if starved:
        remedy = "; run the load tester as root (real-time priority) or on another machine" if g.realtime is False else ""
        return (f"in its worst moment it waited {wait} for a CPU: other processes on this machine, or a lower "
                f"priority (nice), kept it off the CPU; its own work did not{remedy}")
    return f"its own work held the loop (it waited only {wait} for a CPU then): add --workers or lower the load"


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
        starved = starved_by_machine(g)
        if g.loop_lag_p99_s is not None and g.loop_lag_p99_s > LOOP_LAG_WARN_S:
            out.append(
                f"{prefix}: the generator's event loop woke up late (p99 {g.loop_lag_p99_s * 1e3:.0f} ms, "
                f"max {g.loop_lag_max_s * 1e3:.0f} ms): latencies may be overstated by up to that much "
                f"({lag_cause(g, starved)})"
            )
        a = s.arrivals
        if a.slot_waits:
            out.append(
                f"{prefix}: the client concurrency cap ({a.max_concurrency}) was hit: {a.slot_waits} arrivals "
                "waited for a free slot; raise max_concurrency in the profile (e.g. poisson:rate=4,max_concurrency=512)"
            )
        if a.scheduled and a.late:
            cause = ("every slot was busy" if a.slot_waits else
                     "other processes kept the generator off the CPU" if starved else "the generator fell behind")  # fmt: skip
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

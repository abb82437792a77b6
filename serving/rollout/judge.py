"""One step's verdict on a canary against the stable version (pure).

The canary regresses on a measure only when its whole interval lies beyond the stable
version's interval widened by the tolerance: its error rate's lower bound above
stable's upper bound plus ``error_rate_margin``; its TTFT or TPOT p95's lower bound
above ``latency_ratio`` x stable's upper bound; its quality score's upper bound below
stable's lower bound minus ``quality_margin``. Overlapping intervals are noise."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from serving.config.rollout import JudgeSettings
from serving.rollout.evidence import Evidence, quantile, wilson


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WAIT = "wait"  # not enough canary requests yet


@dataclass(frozen=True)
class Verdict:
    """The step's outcome, each finding (one line per measure) and, when it failed, why."""

    outcome: Outcome
    findings: tuple[str, ...]
    reasons: tuple[str, ...] = ()


def judge(evidence: Evidence, settings: JudgeSettings, *, timed_out: bool) -> Verdict:
    """The verdict on ``evidence``; WAIT while the canary has fewer than
    ``min_requests`` requests, unless the step ``timed_out`` (then judged on what it has)."""
    stable, canary = evidence.stable, evidence.canary
    if canary.requests < settings.min_requests and not timed_out:
        return Verdict(Outcome.WAIT, (f"canary requests {canary.requests}/{settings.min_requests}",))
    findings, reasons = [], []
    s_err, c_err = stable.error_rate, canary.error_rate
    findings.append(f"error rate: canary {c_err.describe('%')} ({canary.requests} requests), "
                    f"stable {s_err.describe('%')} ({stable.requests})")
    if canary.requests and c_err.low > s_err.high + settings.error_rate_margin:
        reasons.append(f"error rate {c_err.value:.1%} (lower bound {c_err.low:.1%}) above stable's "
                       f"{s_err.high:.1%} + {settings.error_rate_margin:.1%}")
    for label, c_buckets, s_buckets in (("TTFT p95", canary.ttft, stable.ttft), ("TPOT p95", canary.tpot, stable.tpot)):
        c_p95, s_p95 = quantile(c_buckets), quantile(s_buckets)
        if c_p95 is None or s_p95 is None:
            findings.append(f"{label}: not enough observations on both versions")
            continue
        findings.append(f"{label}: canary {c_p95.describe('s')}, stable {s_p95.describe('s')}")
        if c_p95.low > s_p95.high * settings.latency_ratio:
            reasons.append(f"{label} lower bound {c_p95.low:.3g}s above {settings.latency_ratio:g} x stable's "
                           f"upper bound {s_p95.high:.3g}s")
    if {"stable", "canary"} <= evidence.quality.keys():
        c_q, s_q = wilson(*evidence.quality["canary"]), wilson(*evidence.quality["stable"])
        findings.append(f"quality: canary {c_q.describe('%')}, stable {s_q.describe('%')}")
        if (why := quality_regression(evidence.quality, settings)) is not None:
            reasons.append(why)
    return Verdict(Outcome.FAIL if reasons else Outcome.PASS, tuple(findings), tuple(reasons))


def quality_regression(quality: dict[str, tuple[int, int]], settings: JudgeSettings) -> str | None:
    """Why the canary's probe score is a regression (its upper bound below stable's
    lower bound minus ``quality_margin``), or None (no regression, or no scores)."""
    if not {"stable", "canary"} <= quality.keys():
        return None
    c_q, s_q = wilson(*quality["canary"]), wilson(*quality["stable"])
    if c_q.high < s_q.low - settings.quality_margin:
        return (f"quality {c_q.value:.1%} ({quality['canary'][0]}/{quality['canary'][1]}, upper bound {c_q.high:.1%}) "
                f"below stable's lower bound {s_q.low:.1%} - {settings.quality_margin:.1%}")
    return None

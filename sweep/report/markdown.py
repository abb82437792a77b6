"""``report.md``: the sweep report as Markdown text (pure: report in, text out)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from loadtest.analysis.slo import ObjectiveResult
from loadtest.units import format_seconds
from loadtest.workloads.text_density import TextDensity
from sweep.analysis.models import model_costs
from sweep.analysis.quality import NOT_MEASURED_SIMULATED, short_label
from sweep.analysis.rows import PointRow, RunRow, ScalingKind, ScalingRow
from sweep.analysis.selection import AnswerKind
from sweep.capacity.model import DEFAULT_HEADROOM, ShapeCapacity
from sweep.report.document import SweepReport
from sweep.spec.sweep_spec import simulated_label

CAPACITY_TABLE_ROWS = 8  # replica counts shown per shape in the capacity model


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _money(value: float | None, currency: str) -> str:
    return "-" if value is None else f"{value:,.4g} {currency}"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _observed(v: ObjectiveResult) -> str:
    if v.objective.lower_bound:
        return "-" if v.observed is None else f"{v.observed:.1%}"
    return format_seconds(v.observed)


def _limit(v: ObjectiveResult) -> str:
    limit = v.objective.threshold
    return f">= {limit:.1%}" if v.objective.lower_bound else f"<= {format_seconds(limit)}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _outcome(p: PointRow) -> str:
    """``pass (97%)``, ``fail``, or ``invalid: reasons``."""
    if not p.verdict.valid:
        return _cell("invalid: " + "; ".join(p.verdict.invalid_reasons))
    conf = p.verdict.confidence
    return p.verdict.outcome.value + ("" if conf is None else f" ({conf:.0%})")


def _header(report: SweepReport) -> list[str]:
    spec, budget, traffic = report.spec, report.spec.budget, report.spec.traffic
    slo = [
        f"p95 {name} <= {format_seconds(value)}"
        for name, value in (("TTFT", spec.slo.ttft_p95), ("TPOT", spec.slo.tpot_p95), ("E2E", spec.slo.e2e_p95))
        if value is not None
    ]
    if spec.slo.min_goodput_share is not None:
        slo.append(f"goodput share >= {spec.slo.min_goodput_share:.0%}")
    price = report.prices.price(budget.accelerator)
    title = f"# {'SIMULATED sweep' if report.simulated else 'Sweep'} `{spec.name}` ({report.status.value})"
    lines = [
        title,
        "",
        *([f"> **{simulated_label(spec)}**", ""] if report.simulated else []),
        f"- Model: `{spec.model}`{'' if spec.tested_here else ' (spec not tested on this machine)'}",
        f"- Target traffic: {traffic.profile.name} at {traffic.rate_rps:g} req/s, workload "
        f"{traffic.workload.name} {traffic.workload.input_tokens} -> {traffic.workload.output_tokens} tokens, "
        f"{format_seconds(traffic.duration_s)} per load point after {format_seconds(traffic.warmup_s)} warm-up",
        f"- SLO: {', '.join(slo)}",
        f"- Budget: {budget.total} {budget.accelerator.value} ({budget.nodes} node(s) x "
        f"{budget.accelerators_per_node}, {budget.accelerators_per_rank} per TP rank)",
        f"- Price: {price.per_hour:g} {report.prices.currency} per {budget.accelerator.value}-hour: "
        f"{price.source}, as of {price.as_of} (`{spec.prices}`)",
        f"- Strategy `{report.strategy}`: {report.runs_needed} run(s) for a grid of {report.grid_size} "
        f"({report.runs_measured} measured now, {report.runs_reused} reused, {report.load_points} load points)",
        f"- Generated {report.generated_at}; measurement fingerprint `{report.fingerprint}`",
        "",
    ]
    return lines


def _answer(report: SweepReport) -> list[str]:
    answer, cur = report.answer, report.prices.currency
    lines = ["## Answer", ""]
    if answer.kind is AnswerKind.NONE or answer.best is None:
        return [*lines, answer.explanation, ""]
    best = report.run(answer.best)
    passing = answer.kind is AnswerKind.PASSING
    title = "Cheapest configuration meeting the SLO" if passing else "No configuration meets the SLO; closest"
    lines.append(f"**{title}: `{answer.best}`**")
    if best is not None:
        lines.append(
            f"({best.accelerators} {report.spec.budget.accelerator.value}, "
            f"{_money(best.cost_per_hour, cur)}/h, {_money(best.cost_per_million_output_tokens, cur)} "
            f"per million output tokens and {_money(best.cost_per_request, cur)} per request at the target)"
        )
    lines += ["", answer.explanation, ""]
    lines += _table(
        ("objective", "limit", "observed", "margin", "verdict", "confidence"),
        (
            (v.objective.key, _limit(v), _observed(v), "-" if v.margin is None else f"{v.margin:+.1%}",
             "pass" if v.passed else "FAIL", _share(v.confidence))
            for v in answer.verdicts
        ),
    )
    if best is not None and best.target is not None:
        lines += ["", f"Measured in {best.target.point.samples} sample(s); confidence = share of bootstrap "
                  "resamples in which the objective holds."]
    if answer.failed:
        lines += ["", f"Failed objective(s), worst first: {', '.join(answer.failed)}"]
    if answer.refused:
        lines += ["", "Refused on quality (meet the SLO, no dearer than the answer):", ""]
        lines += [f"- `{r.candidate_id}`: {_cell(r.why)}" for r in answer.refused]
    lines += ["", f"Runner-up: `{answer.runner_up}`" if answer.runner_up else "Runner-up: none", ""]
    return lines


def _runs(report: SweepReport) -> list[str]:
    cur = report.prices.currency
    header = ("candidate", "purpose", "status", "acc.", f"{cur}/h", "TTFT p95", "TPOT p95", "E2E p95",
              "goodput", "at target", "quality", "capacity req/s", "fails at req/s", "req/s", "out tok/s",
              f"{cur}/M tok", f"{cur}/request", f"{cur}/M chars")

    def row(r: RunRow) -> list[str]:
        t = r.target.point if r.target else None
        share = None if t is None else t.goodput_share
        return [
            f"`{r.candidate_id}`", r.purpose.value,
            r.status.value if r.reason is None else _cell(f"{r.status.value}: {r.reason}"),
            str(r.accelerators), _num(r.cost_per_hour, 4),
            format_seconds(t.ttft_p95_s if t else None), format_seconds(t.tpot_p95_s if t else None),
            format_seconds(t.e2e_p95_s if t else None), "-" if share is None else f"{share:.1%}",
            r.outcome_at_target.value if r.target is None else _outcome(r.target),
            short_label(r.quality),
            _num(r.capacity_rps), _num(r.fails_at_rps), _num(r.throughput_rps),
            _num(r.throughput_output_tokens_per_s), _num(r.cost_per_million_output_tokens, 4),
            _num(r.cost_per_request, 4), _num(r.cost_per_million_output_chars, 4),
        ]

    lines = ["## Runs", "", "Figures at the target rate (verdict confidence in brackets); capacity = the highest "
             "achieved rate meeting the SLO, throughput there; costs per million output tokens, per successful "
             "request and per million output characters (- for a synthetic workload: see Cost per character).", ""]
    lines += _table(header, (row(r) for r in report.runs))
    points = [(r, p) for r in report.runs for p in r.points if len(r.points) > 1 or p.point.samples > 1]
    if points:
        lines += ["", "### p95 against offered rate", ""]
        lines += _table(
            ("candidate", "offered req/s", "sent req/s", "samples", "TTFT p95", "TPOT p95", "E2E p95", "SLO"),
            (
                (f"`{r.candidate_id}`", _num(p.point.offered_rps), _num(p.point.rate_rps), str(p.point.samples),
                 format_seconds(p.point.ttft_p95_s), format_seconds(p.point.tpot_p95_s),
                 format_seconds(p.point.e2e_p95_s), _outcome(p))
                for r, p in points
            ),
        )
    return [*lines, ""]


def _quality(report: SweepReport) -> list[str]:
    """The quality gate: the rule, then each run's score and verdict."""
    quality = report.spec.quality
    if quality is None:
        return []
    lines = ["## Quality", ""]
    if report.simulated:
        return [*lines, f"{NOT_MEASURED_SIMULATED}: a simulator produces no answers, so no candidate was graded "
                        "and the gate was not applied.", ""]
    lines += [f"Each deployment answered {quality.items or 'all'} item(s) of `{quality.set_name}` at temperature 0 "
              f"after its load points. Rule: refused when the 95% Wilson lower bound of its score is more than "
              f"{quality.tolerance * 100:g} pts below the reference's (reference: `{quality.reference}`).", ""]
    rows = []
    for r in report.runs:
        v = r.quality
        score = None if v is None else v.score
        rows.append((f"`{r.candidate_id}`", "-" if score is None else f"{score.correct}/{score.items}",
                     "-" if score is None else f"{score.score:.1%} [{score.low:.1%}, {score.high:.1%}]",
                     "-" if v is None or score is None else str(v.errors),
                     "-" if v is None or v.changed is None else str(v.changed),
                     "-" if v is None else _cell(v.explanation)))
    lines += _table(("candidate", "right", "score [95% CI]", "failed requests", "changed vs reference", "verdict"),
                    rows)
    return [*lines, ""]


def _per_model(report: SweepReport) -> list[str]:
    """The answer's cost split over the models it serves (only with adapters)."""
    best = report.run(report.answer.best) if report.answer.best else None
    if not report.spec.adapters or best is None:
        return []
    cur, costs = report.prices.currency, model_costs(report.spec, best.cost_per_hour)
    adapters = [c for c in costs if c.model != report.spec.model]
    lines = ["## Cost per model", "",
             f"`{best.candidate_id}` serves {report.spec.model} and {len(adapters)} LoRA adapter(s) on the same "
             f"replicas, {_money(best.cost_per_hour, cur)}/h in all: "
             f"{_money(best.cost_per_hour / len(adapters), cur)}/h per adapter if split evenly; below, each "
             "model charged its share of the target's requests (the traffic's model mix).", ""]
    lines += _table(("model", "share of requests", "req/s at target", f"{cur}/h"),
                    ((f"`{c.model}`", f"{c.share:.1%}", _num(c.rps), _num(c.cost_per_hour, 4)) for c in costs))
    return [*lines, ""]


def _per_character(report: SweepReport) -> list[str]:
    cur, density = report.prices.currency, report.text_density
    lines = ["## Cost per character", ""]
    if density is None:
        return [*lines, "Not measured: the sweep had no tokenizer of the model to count characters per token.", ""]
    workload, best = density.workload, report.run(report.answer.best or "")
    lines.append(
        f"Workload `{report.spec.traffic.workload.name}`: synthetic token strings in no language, so the runs' "
        f"{cur}/M chars is -." if workload is None else
        f"Workload sets {workload.name}: {_num(workload.chars_per_token)} characters per token."
    )
    per_token = "" if best is None else f" ({_money(best.cost_per_million_output_tokens, cur)} per million tokens)"
    lines += ["", f"Characters per token of the bundled prompt sets with the tokenizer of `{density.tokenizer}`, and "
              f"what the answer's output costs{per_token} per million characters of each language. The load tester "
              "does not keep output text, so answers are taken to be as dense as the prompts in their language. "
              "Input pays the same factor: a prompt of C characters is C x tokens/char tokens to prefill and hold.",
              ""]
    costs = {c.language: c for c in report.language_costs}
    base = density.language("en") or (density.languages[0] if density.languages else None)
    base_tpc = None if base is None else base.tokens_per_char

    def row(d: TextDensity) -> list[str]:
        cost = costs.get(d.language)
        tpc = d.tokens_per_char
        ratio = None if tpc is None or not base_tpc else tpc / base_tpc
        return [d.language, str(d.prompts), str(d.characters), str(d.tokens), _num(tpc), _num(d.chars_per_token),
                "-" if ratio is None else f"{ratio:.2f}x",
                _num(None if cost is None else cost.cost_per_million_output_chars, 4)]

    lines += _table(("language", "prompts", "characters", "tokens", "tokens/char", "chars/token",
                     f"tokens/char vs {'-' if base is None else base.language}",
                     f"{cur}/M output chars ({report.answer.best or 'no answer'})"),
                    (row(d) for d in density.languages))
    return [*lines, ""]


def _efficiency(s: ScalingRow) -> str:
    low = "?" if s.efficiency_low is None else f"{s.efficiency_low:.2f}"
    high = "?" if s.efficiency_high is None else f"{s.efficiency_high:.2f}"
    return f"{s.efficiency:.2f} ({low} to {high})"


def _scaling(rows: Sequence[ScalingRow]) -> list[str]:
    lines = ["## Scaling efficiency", "",
             "Efficiency = achieved speed-up / ideal linear speed-up; speed-up = capacity / base capacity "
             "(highest achieved rates meeting the SLO). In brackets: the range the measured capacities allow "
             "(? = open: no failure measured to bound it).", ""]
    if not rows:
        return [*lines, "Not measured: it needs two runs of a kind that both met the SLO.", ""]
    for kind, title in ((ScalingKind.REPLICAS, "Replicas (against one replica of the shape)"),
                        (ScalingKind.TENSOR_PARALLEL, "Tensor parallel, per accelerator (against the smallest TP)")):
        mine = [s for s in rows if s.kind is kind]
        if mine:
            lines += [f"### {title}", ""]
            lines += _table(
                ("candidate", "base", "accelerators", "capacity req/s", "speed-up", "ideal", "efficiency"),
                ((f"`{s.candidate_id}`", f"`{s.base_id}`", f"{s.accelerators} vs {s.base_accelerators}",
                  f"{s.capacity_rps:.3g} vs {s.base_capacity_rps:.3g}", f"{s.speedup:.2f}x",
                  f"{s.ideal_speedup:.2g}x", _efficiency(s)) for s in mine),
            )
            lines.append("")
    return lines


def _capacity(models: Sequence[ShapeCapacity], currency: str) -> list[str]:
    if not models:
        return ["## Capacity model", "", "No shape met the SLO at any count: nothing to model.", ""]
    lines = ["## Capacity model", "",
             f"Measured capacities, joined by lines, extrapolated with the contention curve, capped below every "
             f"measured failure (`sweep plan` for any traffic). With {DEFAULT_HEADROOM:.0%} headroom, add the "
             "next replica when traffic exceeds the last column.", ""]
    for m in models:
        assumed = " (assumed: no multi-replica run met the SLO)" if m.contention_assumed else ""
        lines += [f"**{m.shape.id}**: c1 = {_num(m.per_replica_rps)} req/s per replica, "
                  f"a = {m.contention:.3g}{assumed}", ""]
        steps = range(1, min(m.max_replicas, CAPACITY_TABLE_ROWS) + 1)
        lines += _table(
            ("replicas", "accelerators", "carries up to req/s", "efficiency", f"{currency}/h", "basis",
             f"add a replica above req/s ({DEFAULT_HEADROOM:.0%} headroom)"),
            ((str(n), str(n * m.accelerators_per_replica), _num(m.capacity_rps(n)), _num(m.efficiency(n), 2),
              _num(n * m.cost_per_replica_hour, 4), m.basis(n), _num(m.capacity_rps(n) * (1 - DEFAULT_HEADROOM)))
             for n in steps),
        )
        lines.append("")
    return lines


def _bullets(title: str, items: Sequence[str]) -> list[str]:
    return [] if not items else [f"## {title}", "", *(f"- {i}" for i in items), ""]


def render_markdown(report: SweepReport) -> str:
    """The whole ``report.md``; a simulated report's title says so and quotes the simulator's caveat under it."""
    lines = _header(report) + _answer(report) + _per_model(report) + _runs(report) + _quality(report)
    lines += _per_character(report)
    lines += ["## Pareto front (cost per million output tokens vs p95 E2E)", "",
              ", ".join(f"`{c}`" for c in report.pareto) or "empty", ""]
    lines += _scaling(report.scaling)
    lines += _capacity(report.capacity, report.prices.currency)
    lines += _bullets("Search notes", report.notes)
    lines += _bullets("Left out by the budget", [f"`{n.candidate_id}`: {n.reason}" for n in report.infeasible])
    lines += _bullets("Assumptions", report.assumptions)
    lines += _bullets("Warnings", report.warnings)
    return "\n".join(lines).rstrip() + "\n"

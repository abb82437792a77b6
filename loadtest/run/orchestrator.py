"""The orchestrator: runs a load test's stages and returns its :class:`Summary`.

It never imports Locust or gevent. Per stage it writes the workload plan and a job
file, starts the load generator (``python -m loadtest.generator``; distributed, that is
the master, and the local workers start once it listens), follows it (tailed records
for live progress, CPU via psutil or the workers' own reports, ``/metrics`` scraped on
a thread), enforces the hard time limit, and turns the raw records into figures. A
worker that crashes, or a master that reports a failed stage, fails the run
(:class:`WorkerError`). The profile decides the next stage from the outcomes so far.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console

from loadtest._version import __version__
from loadtest.analysis.metrics import achieved_rate, build_stage, rate_search_report
from loadtest.analysis.records import RecordTail, RequestRecord, read_records
from loadtest.analysis.stats import Distribution
from loadtest.analysis.summary import GeneratorReport, ServerReport, StageSummary, Summary, WorkerReport
from loadtest.config import Endpoint, LoadTestConfig
from loadtest.errors import ConfigError, GeneratorError, TargetError, WorkerError
from loadtest.generator.child import GeneratorProcess, StageProcesses, cpu_percentages
from loadtest.generator.job import FINAL_GRACE_S, READY_TIMEOUT_S, GeneratorJob, GeneratorStatus, StatusTail
from loadtest.generator.workers import cpu_series, fleet_reports, worker_warnings
from loadtest.profiles import OpenLoad, ReplayLoad, StageOutcome, StagePlan
from loadtest.reports import write_reports
from loadtest.run.advisories import collect_warnings
from loadtest.run.progress import SATURATION_PERCENT, ProgressView, StageProgress
from loadtest.run.gpu_scraper import GpuScraper
from loadtest.run.logs import keep_logs
from loadtest.run.scraper import MetricsScraper
from loadtest.run.tokencount import fill_token_counts
from loadtest.units import format_seconds
from loadtest.workloads.base import WorkloadContext, WorkloadPlan
from loadtest.workloads.model_mix import assign_models, check_named_models
from loadtest.workloads.tenant_mix import assign_tenants, tenant_plans
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer

STARTUP_GRACE_S = 60.0
POLL_S = 0.5
SETTLE_TIMEOUT_S = 5.0
MAX_POOL = 20_000


@dataclass(frozen=True)
class RunOptions:
    """Where and how to report. ``reports`` names report formats (default: all);
    ``python`` is the interpreter that runs the load generator (default: this one)."""

    out_dir: Path | None = None
    reports: tuple[str, ...] | None = None
    progress: bool = False
    console: Console | None = None
    python: str | None = None


@dataclass
class StageResult:
    """One finished stage: its figures, its records and the warnings it raised."""

    summary: StageSummary
    records: list[RequestRecord]
    warnings: list[str] = field(default_factory=list)


def run_load_test(config: LoadTestConfig, options: RunOptions = RunOptions()) -> Summary:
    """Run every stage of ``config`` against its target and return the summary (also
    written to ``options.out_dir`` with the reports, when given)."""
    console = options.console or Console(stderr=True)
    keys = config.tenants.keys(os.environ) if config.tenants is not None else {}
    # /v1/models and /metrics: the run's --api-key, else the first tenant's (a gateway
    # with keys answers them only with one)
    control_key = config.target.api_key or next(iter(keys.values()), None)
    listed = check_target(config, control_key)
    shares = config.model_mix.shares(listed, config.target.url) if config.model_mix is not None else None
    work = Path(tempfile.mkdtemp(prefix="loadtest-"))
    started = time.time()
    scraper = None
    if (url := config.target.resolved_metrics_url) is not None:
        scraper = MetricsScraper(
            url, model=frozenset({config.target.model, *(shares or ())}), interval_s=config.target.scrape_interval_s,
            t0_unix=started, api_key=control_key,
        )
        scraper.scrape_now()
        scraper.start()
    gpu = GpuScraper(config.gpu, t0_unix=started) if config.gpu is not None else None
    if gpu is not None:
        gpu.sample_now()
        gpu.start()
    tokenizer = functools.cache(lambda: load_tokenizer(config.tokenizer or default_tokenizer_path(config.target.model)))
    results: list[StageResult] = []
    history: list[StageOutcome] = []
    try:
        with ProgressView(console, options.progress) as view:
            while (plan := config.profile.next_stage(history)) is not None:
                result = _run_stage(config, plan, work, tokenizer, scraper, gpu, started, view, options,
                                    shares, listed, keys)
                results.append(result)
                s = result.summary
                history.append(
                    StageOutcome(plan=plan, passed=s.passed, reason=s.verdict_reason, achieved_rate=achieved_rate(s))
                )
                view.note(f"stage {plan.index} ({plan.label}): {_one_line(s)}")
        for probe in (scraper, gpu):
            if probe is not None:
                probe.stop()
        summary = summarise_run(config, results, scraper, started)
        if gpu is not None:
            summary = summary.model_copy(update={"gpu": gpu.report()})
        if options.out_dir is not None:
            records = [r for result in results for r in result.records]
            write_reports(summary, records, options.out_dir, options.reports)
            keep_logs(work, options.out_dir)
        return summary
    finally:
        for probe in (scraper, gpu):
            if probe is not None:
                probe.stop()
        shutil.rmtree(work, ignore_errors=True)


def check_target(config: LoadTestConfig, api_key: str | None = None) -> list[str] | None:
    """Fail early when the target is unreachable or does not serve the model; the models
    it lists (``None`` when it lists none). ``api_key``: sent as a bearer token."""
    url = f"{config.target.url}/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(url, timeout=config.target.connect_timeout_s, headers=headers)
    except httpx.HTTPError as exc:
        raise TargetError(f"cannot reach {config.target.url}: {exc}") from None
    if response.status_code != 200:
        return None  # not every server lists models; the load test will show errors if any
    try:
        served = [m.get("id") for m in response.json().get("data", [])]
    except (ValueError, AttributeError):
        return None
    if served and config.target.model not in served:
        raise TargetError(f"{config.target.url} does not serve {config.target.model!r}; it serves {served}")
    return served or None


def pool_size(config: LoadTestConfig, plan: StagePlan, per_session: int) -> int:
    """How many sessions to prepare for a stage (cycled if the run needs more; a replay's
    are its requests)."""
    load = plan.load
    if isinstance(load, ReplayLoad):
        return load.requests
    if config.prompt_pool is not None:
        return config.prompt_pool
    if config.max_requests is not None:
        return max(1, math.ceil(config.max_requests / per_session))
    assert config.duration_s is not None
    if isinstance(load, OpenLoad):
        expected = (load.start_rate + load.end_rate) / 2 * config.duration_s
        return int(min(MAX_POOL, expected * 1.3 + 50))
    return int(min(MAX_POOL, max(64, load.users * config.duration_s * 2 / per_session)))


def check_replay(config: LoadTestConfig, plan: StagePlan) -> None:
    """A replay's duration must hold its trace: the window is the trace's ``end``."""
    load = plan.load
    if isinstance(load, ReplayLoad) and config.duration_s is not None and config.duration_s <= load.span_s:
        raise ConfigError(f"--duration {config.duration_s:g}s ends before the replay's last arrival at "
                          f"{load.span_s:g} s: leave it out, or cut the trace with end=")  # fmt: skip


def _run_stage(config, plan, work, tokenizer, scraper, gpu, started, view, options, shares,
               listed, keys) -> StageResult:
    check_replay(config, plan)
    folder = work / f"stage-{plan.index:02d}"
    folder.mkdir(parents=True)
    per_session = config.workload.requests_per_session
    ctx = WorkloadContext(
        seed=plan.seed(config.seed), chat=config.target.endpoint is Endpoint.CHAT, tokenizer_loader=tokenizer
    )
    pool = pool_size(config, plan, per_session)
    workload_plan: WorkloadPlan = assign_models(config.workload.build(pool, ctx), shares, ctx.seed)
    workload_plan = assign_tenants(workload_plan, config.tenants, ctx.seed, tenant_plans(config.tenants, pool, ctx))
    check_named_models(workload_plan, listed, config.target.url)
    job = GeneratorJob(
        config=config,
        stage=plan,
        plan_path=folder / "plan.json",
        records_path=folder / "records.jsonl",
        status_path=folder / "status.jsonl",
        api_key=config.target.api_key,
        tenant_keys=keys,
    )
    job.plan_path.write_text(workload_plan.model_dump_json(), encoding="utf-8")
    job_path = folder / "job.json"
    job_path.write_text(job.model_dump_json(), encoding="utf-8")
    before = scraper.scrape_now() if scraper is not None else None
    gen = config.generator
    processes = StageProcesses(job_path, folder, gen, options.python)
    child = processes.main
    wall_start = time.time()
    child.start()
    progress = StageProgress(plan.label, plan.index, config.duration_s, config.max_requests, workers=gen.total_workers)
    tail = RecordTail(job.records_path)
    statuses = StatusTail(job.status_path)
    killed = False
    limit = config.stage_time_limit_s + STARTUP_GRACE_S
    if gen.distributed:
        limit += gen.connect_timeout_s + READY_TIMEOUT_S + FINAL_GRACE_S
    try:
        while child.poll() is None:
            time.sleep(POLL_S)
            child.sample_cpu()
            last = statuses.read()
            if not processes.workers_started and (port := statuses.port()) is not None:
                processes.start_workers(port)
            if (crash := processes.crashed()) is not None:
                raise WorkerError(f"stage {plan.index}: {crash}")
            progress.elapsed_s = last.t if last else 0.0
            progress.in_flight = last.in_flight if last else 0
            progress.add(tail.read_new())
            progress.cpu_percent = _latest_cpu(child, statuses, wall_start)
            progress.server = scraper.latest() if scraper else None
            view.update(progress)
            if time.time() - wall_start > limit:
                killed = True
                break
    finally:
        code = processes.stop()  # also on Ctrl-C or an error here: never leave a generator process behind
    # The client sees a stream's last byte slightly before the server counts it done, and
    # an abandoned request runs on until the server notices: wait (bounded) for zero.
    in_flight_after, settled_after = scraper.wait_settled(SETTLE_TIMEOUT_S) if scraper is not None else (None, None)
    if gpu is not None:
        gpu.sample_now()  # the measured window's end is covered
    final = statuses.final()
    first = statuses.first()
    if final is not None and final.error is not None:
        raise WorkerError(f"stage {plan.index}: {final.error}")
    warnings: list[str] = []
    if killed:
        warnings.append(f"stage {plan.index}: the generator overran its {limit:g} s limit and was killed")
    if code not in (0, None) and not killed:
        tail_text = child.log_tail()
        if first is None:
            raise GeneratorError(f"the load generator failed to start (exit {code}):\n{tail_text}")
        if gen.distributed:  # its workers' records may not all have reached the records file
            raise WorkerError(f"stage {plan.index}: the load-generator master exited with code {code}:\n{tail_text}")
        warnings.append(f"stage {plan.index}: the generator exited with code {code}: {tail_text[-300:]}")
    if first is None:
        raise GeneratorError(f"the load generator never started:\n{child.log_tail()}")
    records, token_warning = fill_token_counts(read_records(job.records_path), tokenizer)
    if token_warning:
        warnings.append(f"stage {plan.index}: {token_warning}")
    workers = fleet_reports(final, statuses.worker_samples(), since_unix=first.t0_unix, saturation_percent=SATURATION_PERCENT)
    generator = _generator_report(child, first, final, workers)
    warnings.extend(worker_warnings(plan.index, [report for report, _ in workers]))
    t0 = first.t0_unix
    offset = t0 - started
    samples = []
    if scraper is not None:
        # From this stage's own opening scrape: earlier ones may predate the previous stage's
        # last requests, whose tokens would then be counted twice.
        start_t = before.t if before is not None else offset - 2 * POLL_S - 1.0
        samples = scraper.between(start_t, time.time() - started)
    summary = build_stage(
        records,
        plan=plan,
        window=config.measured_window,
        timed=config.duration_s is not None,
        objectives=config.slos,
        started_unix=t0,
        offset_s=offset,
        generator=generator,
        server_samples=samples,
        max_error_rate=config.profile.max_error_rate,
        duration_s=config.duration_s,
        max_requests=config.max_requests,
        gpu_samples=gpu.samples if gpu is not None else (),
        gpu_source=",".join(gpu.sources) if gpu is not None else "",
        tenant_objectives=config.tenants.objectives() if config.tenants is not None else None,
    )
    if in_flight_after is not None:
        server = summary.server.model_copy(update={"in_flight_after": in_flight_after, "settled": in_flight_after == 0,
                                                   "settled_after_s": settled_after})  # fmt: skip
        summary = summary.model_copy(update={"server": server})
        if in_flight_after:
            warnings.append(f"stage {plan.index}: the server still counted {in_flight_after:g} request(s) in flight "
                            f"{SETTLE_TIMEOUT_S:g} s after the stage's requests were over")  # fmt: skip
    if final is not None and final.session_wraps:
        warnings.append(
            f"stage {plan.index}: the prompt pool of {len(workload_plan.sessions)} sessions was reused "
            f"{final.session_wraps} time(s); repeated prompts may hit the prefix cache (raise --prompt-pool)"
        )
    if final is not None and final.user_errors:
        warnings.append(f"stage {plan.index}: {final.user_errors} errors inside the Locust user (see generator.log)")
    return StageResult(summary, records, warnings)


def _latest_cpu(child: GeneratorProcess, statuses: StatusTail, since_unix: float) -> float | None:
    """The generator's CPU now (distributed: the busiest worker's), in percent of one core."""
    if samples := statuses.worker_samples(last=3):
        latest = [series[-1][1] for series in cpu_series(samples, since_unix).values() if series]
        return max(latest, default=None)
    cpu = cpu_percentages(child.cpu_samples[-3:], since_unix=since_unix)
    return cpu[-1][1] if cpu else None


def _generator_report(
    child: GeneratorProcess,
    first: GeneratorStatus,
    final: GeneratorStatus | None,
    workers: Sequence[tuple[WorkerReport, list[tuple[float, float]]]],
) -> GeneratorReport:
    """The generator's figures. Distributed: CPU seconds of master and workers together,
    CPU percentages of the busiest worker, the worst loop lag; saturated when any worker
    was, real-time when all ran so (the per-worker reports go to ``workers``)."""
    if workers:
        busiest, cpu = max(workers, key=lambda pair: pair[0].cpu_percent_p90 or 0.0)
        saturated = any(report.saturated for report, _ in workers)
        mean, p90, top = busiest.cpu_percent_mean, busiest.cpu_percent_p90, busiest.cpu_percent_max
    else:
        cpu = [(t, p) for t, p in cpu_percentages(child.cpu_samples, since_unix=first.t0_unix) if t >= 0]
        dist = Distribution.of(p for _, p in cpu)
        mean, p90, top = dist.mean, dist.p90, dist.max
        saturated = p90 is not None and p90 >= SATURATION_PERCENT
    return GeneratorReport(
        cpu_seconds=final.cpu_seconds if final else None,
        cpu_seconds_load=final.cpu_seconds_load if final else None,
        cpu_percent_mean=mean,
        cpu_percent_p90=p90,
        cpu_percent_max=top,
        loop_lag_p99_s=final.loop_lag_p99_s if final else None,
        loop_lag_max_s=final.loop_lag_max_s if final else None,
        cpu_wait_s=final.cpu_wait_s if final else None,
        cpu_wait_at_lag_max_s=final.cpu_wait_at_lag_max_s if final else None,
        realtime=final.realtime if final else None,
        saturated=saturated,
        cpu_samples=tuple((round(t, 3), round(p, 2)) for t, p in cpu),
        workers=tuple(report for report, _ in workers),
    )


def summarise_run(config: LoadTestConfig, results: Sequence[StageResult], scraper, started: float, *,
                  simulated: bool = False) -> Summary:
    """The run's :class:`Summary` from its stages (``scraper``: the :class:`MetricsScraper`
    or ``None``; ``started``: the run's start, unix seconds)."""
    stages = tuple(r.summary for r in results)
    sweep = None
    headline = 0
    if config.profile.searches_rate:
        sweep = rate_search_report(stages)
        best = [s for s in stages if s.passed and s.plan.offered_rate == sweep.max_rate_meeting_slo]
        headline = best[0].index if best else 0
    server = ServerReport()
    if scraper is not None:
        server = ServerReport(
            metrics_url=scraper.url,
            scrapes_ok=scraper.ok,
            scrapes_failed=scraper.failed,
            last_error=scraper.last_error,
            timeline=tuple(scraper.samples),
        )
    warnings = [w for r in results for w in r.warnings]
    warnings.extend(collect_warnings(stages, server))
    passed = stages[headline].passed if sweep is None else sweep.max_rate_meeting_slo is not None
    return Summary(
        tool_version=__version__,
        started_unix=started,
        ended_unix=time.time(),
        config=config,
        stages=stages,
        headline_stage=headline,
        sweep=sweep,
        server=server,
        warnings=tuple(warnings),
        passed=passed,
        simulated=simulated,
    )


def _one_line(s: StageSummary) -> str:
    verdict = "" if s.passed is None else (" PASS" if s.passed else f" FAIL ({s.verdict_reason})")
    tok = s.throughput.output_tokens_per_s
    return (
        f"{s.requests.ok} ok / {s.requests.failed} failed, "
        f"TTFT p95 {format_seconds(s.latency.ttft.p95)}, E2E p95 {format_seconds(s.latency.e2e.p95)}, "
        f"{tok or 0:.0f} output tok/s{verdict}"
    )


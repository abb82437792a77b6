"""A simulated load test: every stage of a :class:`LoadTestConfig` against a
:class:`SimulationConfig`'s cluster, summarised by the load tester's own code.

The records are the load tester's :class:`RequestRecord` (start, first token, every
inter-token gap, end, token counts); the stage figures come from
:func:`loadtest.analysis.metrics.build_stage`, the summary from the orchestrator's
summariser, the files from :func:`loadtest.reports.write_reports`. The summary is
labelled simulated: its ``config.label`` starts with "simulated" and its first warning
says so; ``simulation.json`` beside it holds the cluster, the model's constants (and
which are assumed) and each stage's GPU-hours and replica timeline.

Speed: the figures are computed from the records' columns
(:class:`~loadtest.analysis.columns.RecordColumns`, built straight from the cluster's
rows, the gaps as runs of each replica's step gaps: :mod:`simulator.token_gaps`); the
:class:`RequestRecord` objects are built only when asked for (``result.records``: the
reports). A simulated hour is ~180,000 records and ~46M gaps.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadtest.analysis.columns import NONE, SOURCES, RecordColumns
from loadtest.analysis.metrics import achieved_rate, build_stage
from loadtest.analysis.records import RequestRecord, TokenSource
from loadtest.analysis.summary import GeneratorReport, Summary
from loadtest.config import LoadTestConfig
from loadtest.errors import TargetError
from loadtest.profiles import StageOutcome, StagePlan
from loadtest.reports import write_reports
from loadtest.workloads.model_mix import unknown_models
from loadtest.run.orchestrator import StageResult, summarise_run
from simulator.accuracy import band_for
from simulator.cluster import ClusterSim, StageRun
from simulator.config import SimulationConfig
from simulator.errors import SimulationConfigError
from simulator.lora import AdapterCounters
from simulator.replica_setup import ReplicaSetup, replica_setup
from simulator.machine import cpu_mismatch
from simulator.traffic import StageTraffic, TrafficCache, stage_traffic, tokenizer_loader

SIMULATED_ENDPOINT = "the simulated endpoint"
SIMULATED_WARNING = "SIMULATED, not measured: {label} (simulator figures: simulation.json)"
TOKENIZER_FALLBACK = "smollm2-135m-instruct"


@dataclass(frozen=True)
class StageFigures:
    """The cluster side of one simulated stage."""

    index: int
    gpu_hours: float
    preemptions: int
    replica_timeline: tuple[tuple[float, int], ...]
    simulated_s: float
    adapters: AdapterCounters | None = None  # LoRA loads, evictions, slot skips (None: no adapters)


@dataclass
class StageRecords:
    """One stage's records: as :class:`RecordColumns` (what :func:`build_stage` reads),
    and as :class:`RequestRecord` built on first use (the reports, ``records.jsonl``)."""

    columns: RecordColumns
    rows: list[tuple]  # the raw rows of :class:`StageRun`, in the columns' order
    expected: list[int | None]  # each row's expected prompt tokens
    stage: int
    started_unix: float
    exact_output: bool
    models: dict[int, str] | None = None  # each request's model by id (None: no model mix)

    @functools.cached_property
    def records(self) -> list[RequestRecord]:
        """The records (built without re-validating each field)."""
        construct, records = RequestRecord.model_construct, []
        for row, expected, gaps in zip(self.rows, self.expected, self.columns.gaps.tolists()):
            (rid, session, turn, user, scheduled, start, ok, status, kind, error, retry_after, ttft, e2e,
             prompt_tokens, output_tokens, requested) = row
            records.append(construct(
                id=rid, stage=self.stage, session=session, turn=turn, user=user, scheduled_s=scheduled,
                start_s=start, start_unix=self.started_unix + start, ok=ok, status=status, error_kind=kind,
                model=self.models[rid] if self.models is not None else None,
                error=error, retry_after_s=retry_after, ttft_s=ttft, e2e_s=e2e, itl_s=gaps,
                chunks=output_tokens or 0, prompt_tokens=prompt_tokens if ok else None,
                output_tokens=output_tokens, token_source=TokenSource.USAGE if ok else TokenSource.NONE,
                expected_prompt_tokens=expected, requested_output_tokens=requested if self.exact_output else None,
                finish_reason="length" if ok else None))
        return records


@dataclass(frozen=True)
class SimulationResult:
    """What :func:`simulate` returns: the load tester's summary and records, plus cluster figures."""

    summary: Summary
    stage_records: tuple[StageRecords, ...]
    stages: tuple[StageFigures, ...]
    setup: ReplicaSetup
    sim: SimulationConfig
    wall_s: float

    @functools.cached_property
    def records(self) -> list[RequestRecord]:
        """Every stage's records (built on first use: the figures are computed from
        their columns)."""
        return [r for stage in self.stage_records for r in stage.records]

    def simulation_info(self) -> dict:
        """The content of ``simulation.json``."""
        setup, model = self.setup, self.setup.step_model
        return {
            "simulated": True,
            "config": self.sim.model_dump(mode="json"),
            "hardware": setup.hardware.name,
            "assumed_constants": setup.hardware.assumptions(),
            "accuracy": band.model_dump(mode="json") if (band := band_for(self.sim.hardware)) else None,
            "tensor_parallel": setup.tensor_parallel,
            "kv_cache_tokens_per_replica": setup.kv_tokens,
            "block_size": setup.block_size,
            "max_num_seqs": setup.engine.max_num_seqs,
            "max_num_batched_tokens": setup.max_num_batched_tokens,
            "weight_bytes_per_rank": model.weight_bytes,
            "wall_s": round(self.wall_s, 3),
            "lora": setup.lora.model_dump(mode="json") | {"adapters": list(setup.adapters)} if setup.lora else None,
            "stages": [vars(s) | {"replica_timeline": list(s.replica_timeline),
                                  "adapters": vars(s.adapters) if s.adapters else None} for s in self.stages],
        }


def records_of(run: StageRun, stage: int, traffic: StageTraffic, started_unix: float,
               exact_output: bool, model: str = "") -> StageRecords:
    """The stage's records, by start: their columns at once, the records on demand
    (``model``: what a request of a session naming none names, with a model mix)."""
    n = len(run.rows)
    fields = list(zip(*run.rows)) if n else [()] * 16
    (_, sessions, turns, users, scheduled, starts, ok, _, kinds, _, _, ttfts, e2es, prompts, outputs,
     requested) = fields
    order = np.argsort(np.array(starts, dtype=float), kind="stable")
    pick = order.tolist()

    def floats(values) -> np.ndarray:
        return np.fromiter((np.nan if v is None else v for v in values), dtype=float, count=n)[order]

    def ints(values) -> np.ndarray:
        return np.fromiter((NONE if v is None else v for v in values), dtype=np.int64, count=n)[order]

    plan_sessions = traffic.sessions
    expected = [plan_sessions[s].expected_prompt_tokens if t == 0 else None for s, t in zip(sessions, turns)]
    models = None
    if any(s.model is not None for s in plan_sessions):
        models = {row[0]: plan_sessions[row[1]].model or model for row in run.rows}
    ok_rows = np.array(ok, dtype=bool).reshape(n)[order]
    sources = np.where(ok_rows, SOURCES.index(TokenSource.USAGE), SOURCES.index(TokenSource.NONE)).astype(np.int8)
    columns = RecordColumns(
        start_s=floats(starts), e2e_s=floats(e2es), ttft_s=floats(ttfts), scheduled_s=floats(scheduled),
        ok=ok_rows, user=ints(users), output_tokens=ints(outputs),
        prompt_tokens=np.where(ok_rows, ints(prompts), NONE),
        requested_output_tokens=ints(requested) if exact_output else np.full(n, NONE, dtype=np.int64),
        expected_prompt_tokens=ints(expected), token_source=sources,
        error_kind=tuple(kinds[i] for i in pick), gaps=run.itls.table(pick),
        model=np.array([models[run.rows[i][0]] for i in pick], dtype=str) if models is not None else None)
    return StageRecords(columns, [run.rows[i] for i in pick], [expected[i] for i in pick], stage, started_unix,
                        exact_output, models)


def simulate(config: LoadTestConfig, sim: SimulationConfig, *,
             progress: Callable[[StagePlan, float], None] | None = None,
             traffic_cache: TrafficCache | None = None,
             cluster: Callable[..., ClusterSim] = ClusterSim) -> SimulationResult:
    """Simulate every stage of ``config`` (its profile decides the next stage from the
    last, as in ``loadtest run``); each stage starts on a fresh cluster. ``traffic_cache``
    keeps prepared prompts and tokenizers for the next simulations of the same traffic;
    ``cluster`` builds each stage's simulation (a subclass: another autoscaler, say)."""
    wall = time.perf_counter()
    setup = replica_setup(sim)
    shares = served_shares(config, sim)
    label = config.label or sim.label
    config = config.model_copy(update={"label": label if label.startswith("simulated") else f"simulated: {label}"})
    load_tokenizer, fallback_warning = tokenizer_loader(config, TOKENIZER_FALLBACK, cache=traffic_cache)
    started = time.time()
    results: list[StageResult] = []
    history: list[StageOutcome] = []
    figures: list[StageFigures] = []
    stage_records_list: list[StageRecords] = []
    offset = 0.0
    while (plan := config.profile.next_stage(history)) is not None:
        traffic = stage_traffic(config, plan, load_tokenizer, cache=traffic_cache, shares=shares)
        check_served(traffic, sim)
        tick = (lambda t, plan=plan: progress(plan, t)) if progress is not None else None
        run = cluster(setup, sim, config, plan, traffic, seed=plan.seed(config.seed),
                         progress=tick).run()
        stage_records = records_of(run, plan.index, traffic, started + offset, config.target.exact_output,
                                   sim.model)
        stage_records_list.append(stage_records)
        stage = build_stage(stage_records.columns, plan=plan, window=config.measured_window,
                            timed=config.duration_s is not None,
                            objectives=config.slos, started_unix=started + offset, offset_s=offset,
                            generator=GeneratorReport(), max_error_rate=config.profile.max_error_rate,
                            duration_s=config.duration_s, max_requests=config.max_requests)
        warnings = [SIMULATED_WARNING.format(label=config.label)] if not results else []
        if not results and (mismatch := cpu_mismatch(setup.hardware)):
            warnings.append(mismatch)
        if fallback_warning and not results:
            warnings.append(fallback_warning)
        if run.session_wraps:
            warnings.append(f"stage {plan.index}: the prompt pool of {len(traffic.sessions)} sessions was reused "
                            f"{run.session_wraps} time(s); repeated prompts may hit the prefix cache")
        results.append(StageResult(stage, [], warnings))  # the records: stage_records, built on demand
        history.append(StageOutcome(plan=plan, passed=stage.passed, reason=stage.verdict_reason,
                                    achieved_rate=achieved_rate(stage)))
        figures.append(StageFigures(plan.index, run.replica_seconds * setup.tensor_parallel / 3600.0,
                                    run.preemptions, tuple(run.replica_timeline), run.end_s,
                                    run.adapters if setup.lora is not None else None))
        offset += run.end_s
    summary = summarise_run(config, results, None, started, simulated=True)
    return SimulationResult(summary, tuple(stage_records_list), tuple(figures), setup, sim,
                            time.perf_counter() - wall)


def served_shares(config: LoadTestConfig, sim: SimulationConfig) -> dict[str, float] | None:
    """The model mix's shares over what the simulated endpoint serves (the model, then its
    adapters, as ``/v1/models`` lists them); a name it does not serve is a
    :class:`SimulationConfigError`."""
    if config.model_mix is None:
        return None
    try:
        return config.model_mix.shares(sim.served, SIMULATED_ENDPOINT)
    except TargetError as exc:
        raise SimulationConfigError(f"{exc} (give the adapters with --adapters)") from None


def check_served(traffic: StageTraffic, sim: SimulationConfig) -> None:
    """:class:`SimulationConfigError` when a session names a model the simulated endpoint does not serve."""
    unknown = unknown_models((s.model for s in traffic.sessions), sim.served)
    if unknown:
        raise SimulationConfigError(f"the workload names models the simulated endpoint does not serve: "
                                    f"{', '.join(map(repr, unknown))}; it serves {list(sim.served)}")


def write_simulation(result: SimulationResult, out_dir: Path, reports: Sequence[str] | None = None) -> list[Path]:
    """``summary.json`` and the reports (as ``loadtest run`` writes them) plus ``simulation.json``."""
    written = write_reports(result.summary, result.records, out_dir, reports)
    info = out_dir / "simulation.json"
    info.write_text(json.dumps(result.simulation_info(), indent=2, default=_plain), encoding="utf-8")
    return [*written, info]


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")

"""A summary with every section a report can have (a rate sweep of two stages, sessions
with agent steps, client cancels, a model mix, the server's timeline, GPU telemetry) and
its records, built from records without a server (for the report tests)."""

from __future__ import annotations

from loadtest.analysis.metrics import build_stage, rate_search_report
from loadtest.analysis.records import ErrorKind, RequestRecord
from loadtest.analysis.server_metrics import ServerSample
from loadtest.analysis.slo import parse_slos
from loadtest.analysis.summary import GeneratorReport, GpuReport, GpuSample, ServerReport, Summary
from loadtest.config import LoadTestConfig
from loadtest.profiles import parse_profile
from loadtest.workloads import parse_workload
from loadtest.workloads.model_mix import parse_model_mix
from tests.unit.loadtest.loadtest_factories import ok_record

SLOS = "ttft_p95=500ms,e2e_p95=5s"
MODELS = ("clinic", "pharmacy", "smollm2-135m-instruct")  # two adapters and their base


def stage_records(stage: int, rate: float) -> list[RequestRecord]:
    """Sessions of three turns; the second turn an agent step of three branches; one
    request abandoned by the client; the sessions spread over :data:`MODELS`."""
    records = []
    for s in range(12):
        start = s / rate
        for turn, width in ((0, 1), (1, 3), (2, 1)):
            for branch in range(width):
                r = ok_record(start, 0.05 + 0.01 * turn + 0.005 * branch, [0.02] * 15, scheduled=start if turn == 0 else None,
                              session=s, turn=turn, session_seq=s, branch=branch if width > 1 else None,
                              fanout=width if width > 1 else None, stage=stage, model=MODELS[s % 3])
                records.append(r)
            start = max(r.end_s for r in records[-width:]) + 0.3
    gone = records[-1].model_copy(update={"ok": False, "error_kind": ErrorKind.CLIENT_CANCELLED,
                                          "cancel_after_s": 0.2, "ttft_s": None, "itl_s": []})
    return [*records[:-1], gone]


def every_section() -> tuple[Summary, list[RequestRecord]]:
    config = LoadTestConfig(profile=parse_profile("sweep:rates=2,4,refine=0"), workload=parse_workload("random"),
                            duration_s=10.0, slos=parse_slos(SLOS), label="every section",
                            model_mix=parse_model_mix(",".join(f"{m}=1" for m in MODELS)))
    gpu = [GpuSample(t=t * 0.5, power_w=300 + 40 * (t % 5), energy_j=1000 + 150 * t, utilization=0.6,
                     memory_used_mib=40_000, gpus=2) for t in range(60)]
    stages, records = [], []
    for index, rate in enumerate((2.0, 4.0)):
        plan = config.profile.next_stage([])
        plan = plan.model_copy(update={"index": index, "label": f"{rate:g} req/s", "offered_rate": rate})
        rs = stage_records(index, rate)
        records += rs
        stages.append(build_stage(rs, plan=plan, window=(0.0, 10.0), timed=True, objectives=config.slos,
                                  started_unix=1_800_000_000.0 + 12 * index, offset_s=12.0 * index,
                                  generator=GeneratorReport(), duration_s=10.0, gpu_samples=gpu, gpu_source="dcgm"))
    server = ServerReport(metrics_url="http://127.0.0.1:1/metrics", scrapes_ok=12,
                          timeline=tuple(ServerSample(t=2.0 * i, running=i % 4, waiting=0, kv_cache_usage=0.1 * (i % 4))
                                         for i in range(12)))  # fmt: skip
    summary = Summary(tool_version="test", started_unix=1_800_000_000.0, ended_unix=1_800_000_030.0, config=config,
                      stages=tuple(stages), sweep=rate_search_report(stages), server=server,
                      gpu=GpuReport(sources=("dcgm",), samples_ok=len(gpu), timeline=tuple(gpu)))
    return summary, records

"""How a distributed stage is shared among workers and what their reports add up to
(pure logic of loadtest.generator.workers)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadtest.analysis.arrivals import schedule
from loadtest.analysis.summary import WorkerReport
from loadtest.generator.job import GeneratorStatus, WorkerStatus
from loadtest.generator.workers import (
    combined_status,
    cpu_series,
    fleet_reports,
    plan_part,
    plan_shares,
    split_counts,
    worker_warnings,
)
from loadtest.workloads import Session, Turn, WorkloadContext, WorkloadPlan, parse_workload
from loadtest.workloads.tokenizer import load_tokenizer
from tests.fixtures import TINY_TOKENIZER
from tests.paths import REPO

EXCERPT = REPO / "loadtest" / "data" / "traces" / "mooncake-conversation-400.jsonl"


@given(st.integers(0, 10_000), st.lists(st.integers(1, 50), min_size=1, max_size=40))
def test_split_counts_adds_up_exactly_and_stays_proportional(total, weights):
    parts = split_counts(total, weights)
    assert sum(parts) == total and len(parts) == len(weights)
    whole = sum(weights)
    assert all(abs(p - total * w / whole) < 1.0 + 1e-9 for p, w in zip(parts, weights))


def test_open_loop_arrivals_are_dealt_round_robin_exactly_once():
    arrivals = schedule(start_rate=40, burstiness=0.5, seed=3, duration_s=10.0)
    users = [3, 0, 2, 3]  # Locust gave worker 1 no user
    shares = plan_shares(users, arrivals=arrivals, max_requests=None, sessions=100)
    assert shares[1].idle and shares[1].arrivals == ()
    active = [s for s in shares if not s.idle]
    assert [s.slot for s in active] == [0, 1, 2] and {s.slots for s in active} == {3}
    dealt = sorted(a for s in active for a in s.arrivals)
    assert dealt == sorted(float(a) for a in arrivals)  # the union is the schedule, each arrival once
    for s in active:
        assert list(s.arrivals) == [float(a) for a in arrivals[s.slot :: 3]]


def test_budgets_split_exactly_evenly_open_loop_and_by_users_closed_loop():
    arrivals = [0.1 * i for i in range(35)]
    open_shares = plan_shares([1, 1], arrivals=arrivals, max_requests=35, sessions=35)
    assert [s.max_requests for s in open_shares] == [len(s.arrivals) for s in open_shares] == [18, 17]
    closed = plan_shares([1, 2, 0], arrivals=None, max_requests=35, sessions=35)
    assert [s.max_requests for s in closed] == [12, 23, 0]
    assert closed[2].idle and closed[0].arrivals is None
    unlimited = plan_shares([2, 2], arrivals=None, max_requests=None, sessions=10)
    assert [s.max_requests for s in unlimited] == [None, None]


def test_session_blocks_are_disjoint_sized_like_the_shares_and_cover_the_pool():
    plan = WorkloadPlan(sessions=tuple(Session(id=i, turns=(Turn(content=str(i)),)) for i in range(35)))
    shares = plan_shares([1, 2, 0], arrivals=None, max_requests=35, sessions=35)
    parts = [[s.id for s in plan_part(plan, share).sessions] for share in shares]
    assert parts[0] == list(range(0, 12)) and parts[1] == list(range(12, 35))
    assert len(parts[2]) == 1  # an idle worker gets one session, which it never sends
    tiny = WorkloadPlan(sessions=plan.sessions[:1])
    shared = plan_shares([1, 1], arrivals=None, max_requests=None, sessions=1)
    assert [len(plan_part(tiny, s).sessions) for s in shared] == [1, 1]  # too small to split: shared


def test_a_replay_worker_gets_its_own_requests_as_recipes_and_draws_them_as_the_orchestrator_did():
    tokenizer = load_tokenizer(TINY_TOKENIZER)
    ctx = WorkloadContext(seed=2, chat=True, tokenizer_loader=lambda: tokenizer)
    plan = parse_workload(f"trace:{EXCERPT},end=20,sessions=prefix").build(1, ctx)  # the orchestrator's
    forwarded = WorkloadPlan.from_json(plan.model_dump_json(), draw_text=False)  # the master's: not drawn
    shares = plan_shares([1, 1], arrivals=[0.0] * len(plan.sessions), max_requests=None,
                         sessions=len(plan.sessions), paired=True)  # fmt: skip
    for k, share in enumerate(shares):
        sent = plan_part(forwarded, share).model_dump_json()
        assert len(sent) < sum(len(s.turns[0].content) for s in plan.sessions[k::2]) / 20  # recipes, not words
        assert WorkloadPlan.from_json(sent).sessions == plan.sessions[k::2]  # drawn by the worker, word for word


def test_no_worker_with_users_is_an_error():
    with pytest.raises(ValueError):
        plan_shares([0, 0], arrivals=None, max_requests=None, sessions=4)


def status(index, t, cpu, **kw):
    return WorkerStatus(index=index, host="h", pid=100 + index, t_unix=t, cpu_seconds=cpu, **kw)


def test_combined_status_adds_up_workers_and_the_master():
    a = status(0, 10.0, 3.0, issued=5, completed=4, in_flight=1, users=2, cpu_seconds_load=2.0,
               loop_lag_p99_s=0.002, loop_lag_max_s=0.01, cpu_wait_s=0.5, cpu_wait_at_lag_max_s=0.009,
               session_wraps=1, user_errors=1, stop_reason="done")  # fmt: skip
    b = status(1, 10.0, 5.0, issued=7, completed=7, users=3, cpu_seconds_load=4.0,
               loop_lag_p99_s=0.004, loop_lag_max_s=0.008, cpu_wait_s=0.7, cpu_wait_at_lag_max_s=0.001,
               stop_reason="drain timeout")  # fmt: skip
    line = combined_status("final", t=1.0, t0_unix=0.0, workers=[a, b], own_cpu=(1.5, 0.5))
    assert (line.issued, line.completed, line.in_flight, line.users) == (12, 11, 1, 5)
    assert line.cpu_seconds == 9.5 and line.cpu_seconds_load == 6.5
    assert line.loop_lag_p99_s == 0.004 and line.loop_lag_max_s == 0.01
    assert line.cpu_wait_s == 0.7 and line.cpu_wait_at_lag_max_s == 0.009  # the worst wait; the worst lag's own
    assert line.session_wraps == 1 and line.user_errors == 1
    assert line.stop_reason == "done, drain timeout" and line.workers == (a, b)
    running = combined_status("running", t=1.0, t0_unix=0.0, workers=[a])
    assert running.cpu_seconds is None and running.error is None


def test_worker_reports_use_each_workers_own_cpu_samples():
    samples = [status(0, 100.0 + t, 0.5 * t) for t in range(5)] + [status(1, 100.0 + t, 0.95 * t) for t in range(5)]
    series = cpu_series(samples, since_unix=100.0)
    assert [round(p) for _, p in series[0]] == [50] * 4 and [round(p) for _, p in series[1]] == [95] * 4
    final = GeneratorStatus(phase="final", t=5.0, t0_unix=100.0, workers=(
        status(0, 105.0, 2.5, records=10, stop_reason="done"), status(1, 105.0, 4.75, records=12)))  # fmt: skip
    reports = [r for r, _ in fleet_reports(final, samples, since_unix=100.0, saturation_percent=85.0)]
    assert [r.saturated for r in reports] == [False, True]
    assert [r.records for r in reports] == [10, 12] and reports[1].cpu_percent_p90 == pytest.approx(95.0)
    single = GeneratorStatus(phase="final", t=5.0, t0_unix=100.0)
    assert fleet_reports(single, [], since_unix=100.0, saturation_percent=85.0) == ()


def test_worker_warnings_name_saturated_workers_and_skewed_clocks():
    base = dict(host="h", pid=1, records=0)
    ok = WorkerReport(index=0, clock_offset_s=0.004, clock_rtt_s=0.002, **base)
    skewed = WorkerReport(index=1, clock_offset_s=-0.030, clock_rtt_s=0.002, **base)
    busy = WorkerReport(index=2, saturated=True, cpu_percent_p90=97.0, **base)
    warnings = worker_warnings(0, [ok, skewed, busy])
    assert len(warnings) == 2
    assert "worker 1" in warnings[0] and "-30.0 ms" in warnings[0]
    assert "worker 2" in warnings[1] and "97%" in warnings[1]

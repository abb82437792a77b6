"""Simulated requests' gaps kept as runs of their replicas' step gaps: the same floats as
each request's own token times give, and the same stage figures as its records."""

import numpy as np

from loadtest.analysis.metrics import build_stage
from loadtest.cli import build_parser, config_from_args
from simulator.config import SimulationConfig
from simulator.replica import Replica
from simulator.sequence import Seq
from simulator.simulate import simulate
from simulator.token_gaps import TokenGaps
from tests.unit.simulator.fakes import FakeStepModel
from tests.unit.simulator.test_replica import run_to_end


def test_each_row_is_the_diff_of_its_token_times_preempted_or_not():
    replica = Replica(FakeStepModel(), num_blocks=24, block_size=16, max_num_seqs=16, max_num_batched_tokens=512)
    done = run_to_end(replica, [Seq(i, 60, 100 - 7 * i, ()) for i in range(6)], lambda r: None)
    assert replica.preemptions > 0 and any(len(s.segments) > 1 for s in done)
    gaps = TokenGaps()
    for seq in done:
        gaps.append_tokens(replica, seq)
    gaps.append(None)
    order = list(range(len(done) + 1))[::-1]
    rows = gaps.table(order).tolists()
    expected = [[]] + [np.diff(replica.token_times(seq)).tolist() for seq in done][::-1]
    assert rows == expected


def test_the_summary_is_the_load_testers_summary_of_the_records():
    config = config_from_args(build_parser().parse_args([
        "run", "--target", "http://simulated.invalid", "--no-metrics", "--model", "llama-3.3-70b-instruct",
        "--profile", "poisson:rate=10", "--workload", "random:input_len=256,output_len=80,spread=0.5",
        "--duration", "60s", "--warmup", "10s", "--slo", "ttft_p95=2s,itl_p99=100ms,tpot_p90=80ms"]))
    result = simulate(config, SimulationConfig(hardware="h200", model="llama-3.3-70b-instruct", replicas=1,
                                               tensor_parallel=4))
    stage = result.summary.stages[0]
    assert stage.latency.itl.count > 20_000  # the counted path of the ITL figures
    plan = config.profile.next_stage([])
    again = build_stage(result.records, plan=plan, window=config.measured_window, timed=True,
                        objectives=config.slos, started_unix=stage.started_unix, offset_s=0.0,
                        generator=stage.generator, duration_s=config.duration_s)
    assert again == stage

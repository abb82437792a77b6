"""The replica's scheduler (vLLM V1's rules): budget, max_num_seqs, KV capacity,
preemption when full, prefix hits, and every token accounted for."""

import numpy as np

from simulator.replica import Replica
from simulator.sequence import Seq
from tests.unit.simulator.fakes import FakeStepModel


def run_to_end(replica: Replica, seqs: list[Seq], check) -> list[Seq]:
    for seq in seqs:
        replica.add(seq)
    done, t = [], 0.0
    while (end := replica.plan(t)) is not None:
        check(replica)
        done.extend(replica.commit())
        check(replica)
        t = end
    return done


def test_a_step_never_exceeds_the_token_budget_the_seat_count_or_the_kv_cache():
    model = FakeStepModel()
    replica = Replica(model, num_blocks=400, block_size=16, max_num_seqs=8, max_num_batched_tokens=256)
    rng = np.random.default_rng(0)
    seqs = [Seq(i, int(rng.integers(20, 600)), int(rng.integers(1, 60)), ()) for i in range(40)]

    def check(r):
        assert len(r.running) <= 8
        assert 0 <= r.kv.used <= r.kv.capacity

    done = run_to_end(replica, seqs, check)
    assert sorted(s.rid for s in done) == list(range(40))
    assert all(s.prefill_tokens + s.decode_seqs <= 256 and s.num_seqs <= 8 for s in model.shapes)
    assert any(s.prefill_tokens == 256 for s in model.shapes)  # long prompts were chunked
    for seq in done:
        times = replica.token_times(seq)
        assert len(times) == seq.out_len and np.all(np.diff(times) > 0)
    assert replica.kv.used == 0


def test_a_full_kv_cache_preempts_the_newest_sequence_and_still_finishes_everything():
    replica = Replica(FakeStepModel(), num_blocks=24, block_size=16, max_num_seqs=16, max_num_batched_tokens=512)
    seqs = [Seq(i, 60, 100, ()) for i in range(6)]  # 6 x 160 tokens > 24 x 16

    def check(r):
        assert r.kv.used <= r.kv.capacity

    done = run_to_end(replica, seqs, check)
    assert replica.preemptions > 0
    assert sorted(s.rid for s in done) == list(range(6))
    assert all(len(replica.token_times(s)) == 100 for s in done)


def test_a_shared_prefix_is_computed_once_and_its_blocks_reused():
    model = FakeStepModel()
    replica = Replica(model, num_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=4096)
    prefix = (101, 102, 103)  # three 128-token units
    first, second = Seq(0, 400, 4, prefix + (1,)), Seq(1, 400, 4, prefix + (2,))
    run_to_end(replica, [first], lambda r: None)
    run_to_end(replica, [second], lambda r: None)
    prefills = [s.prefill_tokens for s in model.shapes if s.prefill_tokens]
    assert prefills == [400, 400 - 3 * 128]


def test_a_decode_span_is_cut_short_by_an_arrival():
    replica = Replica(FakeStepModel(), num_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=512)
    replica.add(Seq(0, 10, 500, ()))
    end = replica.plan(0.0)
    replica.commit()
    span_end = replica.plan(end)
    cut = replica.interrupt(end + 0.05)
    assert cut is not None and end + 0.05 <= cut < span_end
    replica.commit()
    assert replica.now == cut

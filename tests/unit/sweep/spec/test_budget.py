"""Candidates and budget feasibility, including a 24 x H200 space."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from serving.config.model_spec import AcceleratorKind
from sweep.spec.space import DeploymentCandidate, EngineKnobs, SearchSpace, check_feasibility, replicas_that_fit
from sweep.spec.sweep_spec import BudgetSpec
from tests.unit.sweep.sweep_fakes import PRICES, make_spec

H200_24 = BudgetSpec(accelerator=AcceleratorKind.H200, nodes=3, accelerators_per_node=8)


def test_candidate_ids_are_stable_and_readable():
    c = DeploymentCandidate(tp=2, replicas=3, engine=EngineKnobs(max_num_seqs=64, max_num_batched_tokens=8192))
    assert c.id == "tp2-r3-seqs64-mbt8192"
    assert DeploymentCandidate(tp=1, replicas=1).id == "tp1-r1-seqsdef-mbtdef"
    assert c.shape.with_replicas(3) == c
    assert c.accelerators() == 6 and c.accelerators(accelerators_per_rank=2) == 12
    with_slots = DeploymentCandidate(tp=1, replicas=2, engine=EngineKnobs(max_loras=4))
    assert with_slots.id == "tp1-r2-seqsdef-mbtdef-loras4"  # unset, the ids of before (stored results match)


def test_adapter_slots_are_an_axis_of_the_space():
    spec = make_spec(tp=(1,), replicas_max=1)
    spec = spec.model_copy(update={"space": spec.space.model_copy(update={"max_loras": (2, 8)})})
    space = SearchSpace(spec, PRICES)
    assert [s.engine.max_loras for s in space.shapes] == [2, 8]


def test_24_h200_feasibility():
    assert check_feasibility(DeploymentCandidate(tp=8, replicas=3), H200_24).feasible
    assert check_feasibility(DeploymentCandidate(tp=1, replicas=24), H200_24).feasible
    too_wide = check_feasibility(DeploymentCandidate(tp=16, replicas=1), H200_24)
    assert not too_wide.feasible and "one node" in (too_wide.reason or "")
    too_many = check_feasibility(DeploymentCandidate(tp=8, replicas=4), H200_24)
    assert not too_many.feasible and "budget is 24" in (too_many.reason or "")
    # TP3 groups: two per 8-GPU node, so 6 fit although 7 x 3 = 21 <= 24
    assert replicas_that_fit(3, H200_24) == 6
    packing = check_feasibility(DeploymentCandidate(tp=3, replicas=7), H200_24)
    assert not packing.feasible and "only 6 TP-3 groups" in (packing.reason or "")


def test_quota_caps_the_budget_below_the_hardware():
    quota = BudgetSpec(accelerator=AcceleratorKind.H200, nodes=3, accelerators_per_node=8, max_accelerators=10)
    assert quota.total == 10
    assert replicas_that_fit(4, quota) == 2
    assert not check_feasibility(DeploymentCandidate(tp=4, replicas=3), quota).feasible


def test_cpu_cores_per_rank():
    cpu = BudgetSpec(accelerator=AcceleratorKind.CPU, nodes=1, accelerators_per_node=2, accelerators_per_rank=1)
    assert replicas_that_fit(1, cpu) == 2 and replicas_that_fit(2, cpu) == 1
    two_cores_each = cpu.model_copy(update={"accelerators_per_rank": 2})
    assert replicas_that_fit(1, two_cores_each) == 1 and replicas_that_fit(2, two_cores_each) == 0


def test_search_space_over_24_h200_with_an_impossible_tp():
    spec = make_spec(tp=(1, 2, 4, 8, 16))
    space = SearchSpace(spec, PRICES)
    assert [s.tp for s in space.shapes] == [1, 2, 4, 8]
    assert space.replica_counts(space.shapes[-1]) == (1, 2, 3)
    assert space.grid_size == 24 + 12 + 6 + 3
    assert any(n.candidate_id.startswith("tp16-") for n in space.infeasible)
    assert space.cost_per_hour(DeploymentCandidate(tp=8, replicas=3)) == 24 * 4.0


def test_replica_range_beyond_the_budget_is_listed_as_infeasible():
    spec = make_spec(tp=(8,), replicas_max=5)
    space = SearchSpace(spec, PRICES)
    assert space.replica_counts(space.shapes[0]) == (1, 2, 3)
    assert [n.candidate_id for n in space.infeasible] == ["tp8-r4-seqsdef-mbtdef", "tp8-r5-seqsdef-mbtdef"]


@given(
    nodes=st.integers(1, 4),
    per_node=st.sampled_from([1, 2, 4, 8]),
    per_rank=st.integers(1, 2),
    quota=st.one_of(st.none(), st.integers(1, 40)),
    tp=st.sampled_from([1, 2, 3, 4, 8]),
    replicas=st.integers(1, 40),
)
def test_feasible_means_it_fits(nodes, per_node, per_rank, quota, tp, replicas):
    budget = BudgetSpec(
        accelerator=AcceleratorKind.H200, nodes=nodes, accelerators_per_node=per_node,
        accelerators_per_rank=per_rank, max_accelerators=quota,
    )
    candidate = DeploymentCandidate(tp=tp, replicas=replicas)
    group = tp * per_rank
    fits = (
        group <= per_node
        and replicas * group <= budget.total
        and replicas <= nodes * (per_node // group)
    )
    verdict = check_feasibility(candidate, budget)
    assert verdict.feasible == fits
    assert (verdict.reason is None) == fits
    # replicas_that_fit is exactly the largest feasible count
    top = replicas_that_fit(tp, budget)
    assert (top == 0) or check_feasibility(DeploymentCandidate(tp=tp, replicas=top), budget).feasible
    assert not check_feasibility(DeploymentCandidate(tp=tp, replicas=top + 1), budget).feasible

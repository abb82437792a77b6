import pytest

from serving.engine.cpu_binding import plan_binding


def test_replicas_get_disjoint_cores():
    a = plan_binding(slot=0, tensor_parallel_size=1, cores_per_rank=1, node_cores=[0, 1])
    b = plan_binding(slot=1, tensor_parallel_size=1, cores_per_rank=1, node_cores=[0, 1])
    assert a.omp_threads_bind() == "0" and b.omp_threads_bind() == "1"


def test_one_replica_can_own_the_whole_node():
    binding = plan_binding(slot=0, tensor_parallel_size=1, cores_per_rank=4, node_cores=[0, 1, 2, 3])
    assert binding.omp_threads_bind() == "0-3"


def test_tensor_parallel_ranks_are_separated_by_a_bar():
    binding = plan_binding(slot=0, tensor_parallel_size=2, cores_per_rank=1, node_cores=[0, 1])
    assert binding.omp_threads_bind() == "0|1"
    assert binding.all_cores == {0, 1}


def test_oversubscription_wraps_around():
    binding = plan_binding(slot=2, tensor_parallel_size=1, cores_per_rank=1, node_cores=[4, 5])
    assert binding.omp_threads_bind() == "4"


def test_non_contiguous_cores_are_listed():
    binding = plan_binding(slot=0, tensor_parallel_size=1, cores_per_rank=2, node_cores=[1, 3])
    assert binding.omp_threads_bind() == "1,3"


def test_no_cores_is_an_error():
    with pytest.raises(ValueError):
        plan_binding(slot=0, tensor_parallel_size=1, cores_per_rank=1, node_cores=[])

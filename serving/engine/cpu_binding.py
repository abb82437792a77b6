"""Per-replica CPU core binding for vLLM's CPU backend.

Each engine replica must own its cores: with the default binding every engine on a
node binds to the same core (measured here: two replicas on one core, the other
idle). A replica in core slot ``s`` (:mod:`serving.engine.core_slots`), with ``tp``
tensor-parallel ranks and ``c`` cores per rank, gets cores ``[s*tp*c, (s+1)*tp*c)`` of
the node (wrapping when the node is oversubscribed), one ``|``-separated group per TP
rank, the format of ``VLLM_CPU_OMP_THREADS_BIND``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuBinding:
    """The cores of one replica, grouped by tensor-parallel rank."""

    rank_cores: tuple[tuple[int, ...], ...]

    @property
    def all_cores(self) -> set[int]:
        return {c for group in self.rank_cores for c in group}

    def omp_threads_bind(self) -> str:
        """The ``VLLM_CPU_OMP_THREADS_BIND`` value, e.g. ``"0-1"`` or ``"0|1"``."""
        return "|".join(_core_list(group) for group in self.rank_cores)


def plan_binding(
    *, slot: int, tensor_parallel_size: int, cores_per_rank: int, node_cores: list[int]
) -> CpuBinding:
    """The cores a replica should use (pure; see the module docstring)."""
    if not node_cores:
        raise ValueError("no CPU cores available to bind")
    cores = sorted(node_cores)
    per_replica = tensor_parallel_size * cores_per_rank
    start = slot * per_replica
    picked = [cores[(start + i) % len(cores)] for i in range(per_replica)]
    groups = tuple(
        tuple(picked[r * cores_per_rank : (r + 1) * cores_per_rank])
        for r in range(tensor_parallel_size)
    )
    return CpuBinding(groups)


def apply_binding(binding: CpuBinding) -> None:
    """Pin this process (and the engine processes it starts) to the binding's cores."""
    os.sched_setaffinity(0, binding.all_cores)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = binding.omp_threads_bind()


def _core_list(cores: tuple[int, ...]) -> str:
    ordered = sorted(cores)
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 1:
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))

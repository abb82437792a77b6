"""Measure this machine's memory bandwidth and float32 matmul peak (a few seconds, numpy only).

    python -m simulator.measure_cpu            # prints the figures as YAML for hardware/cpu.yaml

Bandwidth: the best of several copies of a 256 MiB array (bytes read + written per
second). Compute: the best of several float32 matmuls of 1024 x 1024 (2 n^3 FLOPs
each). Best-of, not mean: the machine is shared and a busy neighbour only slows runs.
"""

from __future__ import annotations

import os
import time

import numpy as np

COPY_BYTES = 256 * 1024 * 1024
MATMUL_N = 1024


def memory_bandwidth_gbps(repeats: int = 5, nbytes: int = COPY_BYTES) -> float:
    """GB/s moved by ``np.copyto`` (read + write) on the fastest of ``repeats`` copies."""
    source = np.ones(nbytes // 8, dtype=np.float64)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.nbytes / best / 1e9


def matmul_tflops(repeats: int = 5, n: int = MATMUL_N) -> float:
    """float32 TFLOP/s of the fastest of ``repeats`` n x n matmuls (all cores numpy's BLAS uses)."""
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    a @ b  # warm-up: thread pool start
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def main() -> int:
    bandwidth, flops = memory_bandwidth_gbps(), matmul_tflops()
    print(f"# {os.cpu_count()} cores; python -m simulator.measure_cpu")
    print(f"memory_bandwidth_gbps: {bandwidth:.1f}")
    print(f"peak_tflops_float32: {flops:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Cost and efficiency maths (pure functions of numbers).

- cost per hour = accelerators x price per accelerator-hour;
- cost per million output tokens = cost per hour / (output tokens/s x 3600) x 1e6,
  i.e. what a million generated tokens cost while the deployment runs at that
  throughput (idle capacity is paid for too);
- scaling efficiency of N replicas = throughput(N) / (N x throughput(1)), per shape
  (1.0 = perfect linear scaling).
"""

from __future__ import annotations

import math

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6


def cost_per_hour(accelerators: int, price_per_accelerator_hour: float) -> float:
    """What running ``accelerators`` costs for one hour."""
    if accelerators < 0 or price_per_accelerator_hour < 0:
        raise ValueError("accelerators and price must be >= 0")
    return accelerators * price_per_accelerator_hour


def cost_per_million_tokens(cost_per_hour_: float, output_tokens_per_s: float) -> float | None:
    """Cost of a million output tokens at this throughput; ``None`` when nothing came out."""
    if output_tokens_per_s <= 0 or not math.isfinite(output_tokens_per_s):
        return None
    return cost_per_hour_ / (output_tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_MILLION


def scaling_efficiency(throughput_n: float, replicas: int, throughput_1: float) -> float | None:
    """``throughput_n / (replicas * throughput_1)``; ``None`` without a one-replica figure."""
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    if throughput_1 <= 0:
        return None
    return throughput_n / (replicas * throughput_1)

"""GPU telemetry: DCGM exporter text into readings, readings into a stage's power,
energy and tokens per joule (pure).

DCGM exporter fields read (dcgm-exporter's default counters): ``DCGM_FI_DEV_POWER_USAGE``
(W), ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since boot, a counter),
``DCGM_FI_DEV_GPU_UTIL`` (%) and ``DCGM_FI_DEV_FB_USED`` (MiB), one series per GPU
(labels ``gpu`` and ``UUID``, ``Hostname`` on a multi-node scrape). DCGM's "blank" values
(huge sentinels for a field the GPU does not report) count as missing.

A stage's energy is taken from the energy counters when every GPU has one (the counter
interpolated at the measured window's edges), else from power integrated over the window
(trapezoids between samples); tokens per joule divide the window's tokens by it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from loadtest.analysis.server_metrics import parse_samples
from loadtest.analysis.summary import GpuSample, GpuStage

POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
BLANK = 1e15  # DCGM's blank sentinels are far above any real reading


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment; ``None`` for a field it did not report."""

    key: str
    power_w: float | None = None
    energy_j: float | None = None
    utilization: float | None = None  # fraction
    memory_used_mib: float | None = None


def parse_dcgm(text: str, source: str = "") -> list[GpuReading]:
    """The GPUs of one DCGM exporter scrape (:class:`~loadtest.errors.ParseError` on
    malformed text); ``source`` prefixes each GPU's key (one exporter per node)."""
    fields: dict[str, dict[str, float]] = {}
    for sample in parse_samples(text):
        name = sample.name.removesuffix("_total")
        if name not in (POWER, ENERGY, UTIL, FB_USED) or not 0 <= sample.value < BLANK:
            continue
        labels = sample.labels
        gpu = labels.get("UUID") or labels.get("gpu") or "?"
        key = f"{source}{labels.get('Hostname', '')}/{gpu}"
        fields.setdefault(key, {})[name] = float(sample.value)
    return [
        GpuReading(key=key, power_w=f.get(POWER), energy_j=None if ENERGY not in f else f[ENERGY] / 1000.0,
                   utilization=None if UTIL not in f else f[UTIL] / 100.0, memory_used_mib=f.get(FB_USED))
        for key, f in sorted(fields.items())
    ]  # fmt: skip


def combine(readings: Sequence[GpuReading], t: float) -> GpuSample:
    """Every GPU of one moment as one sample: power, energy and memory added up (energy
    only when every GPU has a counter), utilisation averaged."""

    def values(field: str) -> list[float]:
        return [v for r in readings if (v := getattr(r, field)) is not None]

    power, energy, util, memory = values("power_w"), values("energy_j"), values("utilization"), values("memory_used_mib")
    return GpuSample(
        t=t,
        power_w=sum(power) if power else None,
        energy_j=sum(energy) if energy and len(energy) == len(readings) else None,
        utilization=sum(util) / len(util) if util else None,
        memory_used_mib=sum(memory) if memory else None,
        gpus=len(readings),
    )


def _at(t: np.ndarray, y: np.ndarray, at: float) -> float | None:
    """``y`` linearly interpolated at ``at`` (``None`` outside the samples)."""
    if not len(t) or at < t[0] or at > t[-1]:
        return None
    return float(np.interp(at, t, y))


def window_energy(samples: Sequence[GpuSample], start: float, end: float) -> tuple[float | None, str | None]:
    """Joules used between ``start`` and ``end`` (run seconds) and how it was found
    (``counter`` or ``power``); ``(None, None)`` when the samples do not cover it."""
    counted = [s for s in samples if s.energy_j is not None]
    if len(counted) >= 2:
        t = np.array([s.t for s in counted])
        e = np.array([s.energy_j for s in counted])
        a, b = _at(t, e, start), _at(t, e, end)
        if a is not None and b is not None and b >= a:
            return b - a, "counter"
    powered = [s for s in samples if s.power_w is not None]
    if len(powered) < 2:
        return None, None
    t = np.array([s.t for s in powered])
    p = np.array([s.power_w for s in powered])
    if start < t[0] or end > t[-1]:
        return None, None
    inside = (t > start) & (t < end)
    grid = np.concatenate(([start], t[inside], [end]))
    watts = np.interp(grid, t, p)
    return float(np.sum(0.5 * (watts[1:] + watts[:-1]) * np.diff(grid))), "power"


def gpu_stage(samples: Iterable[GpuSample], *, start: float, end: float, output_tokens: float,
              total_tokens: float, source: str) -> GpuStage | None:
    """A stage's GPU figures over its measured window ``[start, end]`` (run seconds)."""
    samples = sorted(samples, key=lambda s: s.t)
    if not samples:
        return None
    inside = [s for s in samples if start <= s.t <= end] or samples
    power = [s.power_w for s in inside if s.power_w is not None]
    util = [s.utilization for s in inside if s.utilization is not None]
    memory = [s.memory_used_mib for s in inside if s.memory_used_mib is not None]
    energy, how = window_energy(samples, start, end)
    usable = energy is not None and energy > 0
    return GpuStage(
        source=source,
        gpus=max(s.gpus for s in samples),
        samples=len(inside),
        power_mean_w=sum(power) / len(power) if power else None,
        power_max_w=max(power) if power else None,
        energy_j=energy,
        energy_from=how,
        output_tokens_per_joule=output_tokens / energy if usable else None,
        total_tokens_per_joule=total_tokens / energy if usable else None,
        joules_per_output_token=energy / output_tokens if usable and output_tokens else None,
        utilization_mean=sum(util) / len(util) if util else None,
        memory_used_max_mib=max(memory) if memory else None,
    )

"""The simulator's GPU answers against published vLLM measurements (issue 20).

Replays every point of ``benchmarks/published/points.yaml`` (published figures, each
with its source and setup) on the simulator's own scheduler and step-time model, fits
the GPU constants on the points marked ``use: fit`` and reports the error of every
point, fit and validation points apart (a validation point is never fitted)::

    .venv/bin/python -m benchmarks.published_accuracy [--write] [--json results/published_accuracy.json]

What is fitted: the hardware's bandwidth shares (bf16 and fp8 weights, KV reads and how
they fall with few KV heads per rank) and the all-reduce latency per rank, shared by
every point on that GPU; and per source (per vLLM version) the step and sequence
overheads and the all-reduce latency, software's costs. The GEMMs' and the all-reduce's
shares come from Vidur's operator profiles, attention's from FlashAttention's paper
(h100.yaml names them).
``--write`` puts the fitted constants into ``simulator/hardware/h100.yaml`` and
``h200.yaml`` (same Hopper kernels: the H200 takes the H100's shares with its own
datasheet) and the validation error band into ``simulator/hardware/accuracy.yaml``,
which ``simulator run``, ``sweep run --simulate`` and ``sweep plan`` print beside every
simulated answer. Pure arithmetic on the points: about a second, no GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from serving.config.model_spec import ModelArchitecture
from simulator.accuracy import ACCURACY_FILE, AccuracyBand, write_bands
from simulator.batch_run import BatchSteps, run_batch
from simulator.hardware import HARDWARE_DIR, HardwareProfile, load_hardware
from simulator.point_fit import FitPoint, PointFit, fit_points
from simulator.step_time import StepTimeModel

REPO = Path(__file__).resolve().parents[1]
POINTS = REPO / "benchmarks" / "published" / "points.yaml"
HARDWARE_PARAMS = {0: "memory", 2: "kv_memory", 6: "allreduce_per_rank"}  # compute, network, attention: sourced
SOFTWARE_PARAMS = {5: "allreduce", 7: "step", 8: "seq"}  # the vLLM version's: one value per source
START = {"memory": 1 / 0.8, "fp8_memory": 1 / 0.7, "compute": 1 / 0.6, "kv_memory": 1 / 0.6, "attention": 1 / 0.4,
         "allreduce_per_rank": 3e-6, "kv_heads_half": 0.5, "allreduce": 20e-6, "step": 2e-3, "seq": 20e-6}
BOUNDS = {"memory": (1.0, 20.0), "fp8_memory": (1.0, 20.0), "compute": (1.0, 20.0), "kv_memory": (1.0, 20.0),
          "attention": (1.0, 20.0), "allreduce_per_rank": (1e-8, 2e-5), "allreduce": (1e-6, 1e-4),
          "step": (1e-5, 2e-2), "seq": (1e-8, 1e-3), "kv_heads_half": (1e-4, 16.0)}  # shares within 0.05..1; seconds
NEWEST = "lambda"  # the newest vLLM among the sources: its overheads go into the profiles
FIGURE_UNITS = {"latency_s": "s", "duration_s": "s", "median_tpot_ms": "ms", "median_ttft_ms": "ms",
                "output_tok_s": "tok/s"}
console = Console() if sys.stdout.isatty() else Console(width=200)


@dataclass(frozen=True)
class Replayed:
    """A point of the data file and its replayed run."""

    spec: dict
    point: FitPoint

    @property
    def fit(self) -> bool:
        return self.spec["use"] == "fit"


def load_points(path: Path = POINTS) -> dict:
    data = yaml.safe_load(path.read_text())
    for p in data["points"]:
        if p["source"] not in data["sources"] or p["model"] not in data["models"] or p["use"] not in ("fit", "validate"):
            raise ValueError(f"{path}: bad point {p}")
    return data


def label(p: dict) -> str:
    quant = " fp8" if p.get("quantization") else ""
    if p["kind"] == "batch":
        shape = f"b{p['batch']} {p['input']}/{p['output']}"
    else:
        shape = f"{len(p['input_lens'])} ShareGPT prompts"
    return f"{p['source']}: {p['model']}{quant} TP{p['tp']} {shape}"


def model_of(p: dict, data: dict, hardware: HardwareProfile) -> StepTimeModel:
    arch = ModelArchitecture(**data["models"][p["model"]])
    return StepTimeModel(arch, hardware, tensor_parallel=p["tp"], dtype="float16",
                         quantization=p.get("quantization"), kv_cache_dtype=p.get("kv_cache_dtype", "auto"))


def replay(p: dict, data: dict, hardware: HardwareProfile) -> BatchSteps:
    """The point's run on one replica of ``hardware`` (the source's engine settings)."""
    engine = data["sources"][p["source"]]["engine"]
    model = model_of(p, data, hardware)
    space = hardware.memory_gb.value * 1e9 * engine["gpu_memory_utilization"] - model.weight_bytes \
        - hardware.reserved_bytes
    blocks = int(space // (model.kv_bytes_per_token * engine["block_size"]))
    if blocks < 1:
        raise ValueError(f"{label(p)}: no room for a KV cache on {hardware.name} (weights {model.weight_bytes / 1e9:.1f} GB)")
    if p["kind"] == "batch":
        prompts, outputs = [p["input"]] * p["batch"], [p["output"]] * p["batch"]
    else:
        prompts, outputs = p["input_lens"], p["output_lens"]
    return run_batch(model, prompts, outputs, num_blocks=blocks, block_size=engine["block_size"],
                     max_num_seqs=engine["max_num_seqs"], max_num_batched_tokens=engine["max_num_batched_tokens"])


def slots(p: dict) -> dict[int, str]:
    """The point's free coefficients: the GPU's shares (fp8 weights have their own
    bandwidth share; the GEMMs' compute share is Vidur's, fp8's taken as bf16's) and its source's
    software constants."""
    out = dict(HARDWARE_PARAMS)
    if p.get("quantization") == "fp8":
        out[0] = "fp8_memory"
    out.update({i: f"{name}@{p['source']}" for i, name in SOFTWARE_PARAMS.items()})
    return out


def replay_all(data: dict, hardware: HardwareProfile) -> list[Replayed]:
    out = []
    for i, p in enumerate(data["points"]):
        steps, model = replay(p, data, hardware), model_of(p, data, hardware)
        scales = {2: ("kv_heads_half", model.kv_heads_per_rank)}
        out.append(Replayed(p, FitPoint(f"{i}", steps, p["figure"], float(p["value"]), model.coefficients,
                                        slots(p), scales)))
    return out


def start_values(points: list[FitPoint]) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    names = {n for p in points for n in (*p.slots.values(), *(name for name, _ in p.scales.values()))}
    base = {n: n.split("@")[0] for n in names}
    return {n: START[b] for n, b in base.items()}, {n: BOUNDS[b] for n, b in base.items()}


def errors(rows: list[Replayed], fit: PointFit) -> np.ndarray:
    return np.array([r.point.error(fit.params) * 100 for r in rows])


def summary(errs: np.ndarray) -> str:
    a = np.abs(errs)
    return (f"{len(a)} points: median |error| {np.median(a):.1f}%, p90 {np.percentile(a, 90):.1f}%, "
            f"max {a.max():.1f}%") if len(a) else "no points"


def table(rows: list[Replayed], fit: PointFit, title: str) -> Table:
    t = Table("point", "figure", "published", "predicted", "error", title=title, title_justify="left")
    for r in rows:
        predicted = r.point.predict(fit.params)
        unit = FIGURE_UNITS[r.spec["figure"]]
        t.add_row(label(r.spec), r.spec["figure"], f"{r.spec['value']:.4g} {unit}", f"{predicted:.4g} {unit}",
                  f"{(predicted / r.spec['value'] - 1) * 100:+.1f}%")
    return t


SHARE_PARAMS = ("memory", "fp8_memory", "kv_memory")
UNITS = {"allreduce": ("allreduce_latency_us", 1e6), "allreduce_per_rank": ("allreduce_latency_per_rank_us", 1e6),
         "step": ("step_overhead_ms", 1e3), "seq": ("seq_overhead_us", 1e6)}


def describe(name: str, value: float) -> str:
    base = name.split("@")[0]
    if base in SHARE_PARAMS:
        return f"share {1 / value:.3f}"
    if base == "kv_heads_half":
        return f"{value:.3g} heads"
    field, scale = UNITS[base]
    return f"{value * scale:.3g} {field.rsplit('_', 1)[1]}"


def profile_efficiency(params: dict[str, float], sourced) -> dict[str, tuple[float, str | None]]:
    """The profile's efficiency fields from the fitted parameters (the newest source's
    software constants); ``None`` source: the hardware fit's."""
    out: dict[str, tuple[float, str | None]] = {}
    for name in SHARE_PARAMS:
        out[name] = (1 / params[name], None)
    out["kv_heads_half"] = (params["kv_heads_half"], None)
    for name in ("compute", "attention", "network"):
        figure = getattr(sourced, name)
        out[name] = (figure.value, figure.source)
    for name, (field, scale) in UNITS.items():
        key = name if name in params else f"{name}@{NEWEST}"
        out[field] = (params[key] * scale, "software" if "@" in key else None)
    return out


def efficiency_block(fields: dict[str, tuple[float, str]]) -> str:
    lines = ["efficiency:"]
    for name, (value, source) in fields.items():
        lines.append(f"  {name}: {{value: {value:.4g}, source: {json.dumps(source)}}}")
    return "\n".join(lines) + "\n"


def write_profile_efficiency(path: Path, block: str) -> None:
    """Replace the ``efficiency:`` block of a profile file (comments elsewhere kept)."""
    text = path.read_text()
    new = re.sub(r"^efficiency:\n(?:  .*\n)+", block, text, count=1, flags=re.M)
    path.write_text(new)
    load_hardware(path)  # still a valid profile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true",
                        help="write the fitted constants into h100.yaml/h200.yaml and the band into accuracy.yaml")
    parser.add_argument("--json", type=Path, default=REPO / "results" / "published_accuracy.json")
    args = parser.parse_args()
    data = load_points()
    hardware = load_hardware("h100")
    rows = replay_all(data, hardware)
    fit_rows = [r for r in rows if r.fit]
    valid_rows = [r for r in rows if not r.fit]
    start, bounds = start_values([r.point for r in fit_rows])
    fit = fit_points([r.point for r in fit_rows], start, bounds)
    unfitted = {n for r in valid_rows for n in r.point.slots.values()} - set(fit.params)
    if unfitted:
        raise SystemExit(f"validation points need constants no fit point sets: {', '.join(sorted(unfitted))}")
    console.print(table(fit_rows, fit, "FIT points (the constants are fitted on these)"))
    console.print(table(valid_rows, fit, "VALIDATION points (never fitted)"))
    fit_errs, valid_errs = errors(fit_rows, fit), errors(valid_rows, fit)
    console.print(f"fit:        {summary(fit_errs)} (rms {fit.rms_error * 100:.1f}%, {fit.iterations} iterations)")
    console.print(f"validation: {summary(valid_errs)}")
    for source in data["sources"]:
        for figure in sorted({r.spec["figure"] for r in valid_rows}):
            sel = np.array([r.spec["source"] == source and r.spec["figure"] == figure for r in valid_rows])
            if sel.any():
                console.print(f"  validation {source} {figure}: {summary(valid_errs[sel])}")
    console.print("constants: " + ", ".join(f"{n} {describe(n, v)}" for n, v in sorted(fit.params.items())))
    results = {"fit": [dict(r.spec, error_pct=e) for r, e in zip(fit_rows, fit_errs)],
               "validation": [dict(r.spec, error_pct=e) for r, e in zip(valid_rows, valid_errs)],
               "constants": fit.params}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1, default=float))
    if args.write:
        write_fitted(data, fit, fit_rows, valid_rows, valid_errs)
    return 0


def write_fitted(data: dict, fit: PointFit, fit_rows: list[Replayed], valid_rows: list[Replayed],
                 valid_errs: np.ndarray) -> None:
    """The fitted constants into the Hopper profiles, the band into accuracy.yaml."""
    counts = {s: sum(r.spec["source"] == s for r in fit_rows) for s in data["sources"]}
    hw_source = ("fitted: python -m benchmarks.published_accuracy on " + " + ".join(
        f"{n} {s} points ({data['sources'][s]['title']})" for s, n in counts.items() if n)
        + f"; validation median |error| {np.median(np.abs(valid_errs)):.1f}% on {len(valid_errs)} other points")
    sw_source = (f"fitted as above: the value of vLLM {data['sources'][NEWEST]['vllm']} ({NEWEST} points), the "
                 f"newest vLLM among the sources (software, not the GPU)")
    fields = profile_efficiency(fit.params, load_hardware("h100").efficiency)
    block = efficiency_block({k: (v, sw_source if s == "software" else s or hw_source) for k, (v, s) in fields.items()})
    for name in ("h100", "h200"):
        write_profile_efficiency(HARDWARE_DIR / f"{name}.yaml", block)
    band = AccuracyBand.of(valid_errs, sources=sorted({r.spec["source"] for r in valid_rows}),
                           measured_on="h100")
    write_bands(ACCURACY_FILE, {"h100": band, "h200": band.model_copy(update={
        "note": "the H100's band: the H200 profile takes the H100's fitted shares (same Hopper kernels); "
                "no public H200 vLLM point with a complete setup was found to validate on"})})
    console.print(f"wrote the constants into h100.yaml and h200.yaml, the band into {ACCURACY_FILE}")


if __name__ == "__main__":
    sys.exit(main())

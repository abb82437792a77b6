"""Step time of one vLLM engine by batch composition: what the simulator's calibration fits.

Drives ONE real engine in this process (vLLM V1 with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
serving's engine arguments, no server, no Ray) through the batches of :func:`grid`, after a
warm-up, and times each step from the end of scheduling to the start of the output update
(model forward + sampling). Its composition comes from vLLM's ``SchedulerOutput``. Prompts
are distinct random tokens, prefix caching is off, scheduling synchronous (one step, one
forward). Writes ``results/step_times-<hardware>[-quick].json`` (schema 1, read by
``python -m simulator calibrate``) and prints step times by kind.

    .venv/bin/python -m benchmarks.step_time [--quick] [--model NAME] [--out PATH]
    .venv/bin/python -m benchmarks.step_time --hardware h200 --model llama-3.1-8b-instruct
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.common.engine import Driver, Limits, in_process_engine, prepare_process
from benchmarks.common.model import MODEL
from serving.config.loading import build_stack_config
from serving.config.model_spec import Dtype, ModelCatalog, ModelSpec
from serving.config.stack import StackConfig
from serving.errors import ConfigError
from serving.model_store import ModelStore, models_dir
from simulator.machine import cpu_model

REPO = Path(__file__).resolve().parents[1]
SCHEMA = 1
EXIT_CONFIG = 3  # unknown or unprepared model, invalid override (argparse usage errors exit 2)
KINDS = ("prefill", "decode", "mixed")
LONG_PREFILL_S = {False: 16.0, True: 6.0}  # prefill time allowed per long-context decode batch
console = Console() if sys.stdout.isatty() else Console(width=140)


# --- pure: a step's composition, the grid, the report ----------------------------------


@dataclass(frozen=True)
class Composition:
    """What one engine step computed."""

    prefill_tokens: int  # prompt tokens computed (a chunked prefill counts its chunk)
    decode_seqs: int  # sequences producing a decode token
    context_tokens: int  # sum of scheduled sequences' tokens already in the KV cache
    num_seqs: int  # scheduled sequences

    @property
    def kind(self) -> str:
        if self.prefill_tokens and self.decode_seqs:
            return "mixed"
        return "prefill" if self.prefill_tokens else "decode"


def composition(scheduler_output, prompt_lens: Mapping[str, int]) -> Composition:
    """A step's composition from vLLM's ``SchedulerOutput`` (pure; read, never changed).

    ``prompt_lens`` maps request ids to prompt lengths (new requests carry their own). A
    sequence decodes when its prompt is in the cache and it computes one token; every
    other scheduled token (prompt chunks, recomputation after preemption) is prefill.
    """
    new = scheduler_output.scheduled_new_reqs
    cached = scheduler_output.scheduled_cached_reqs
    computed = {r.req_id: r.num_computed_tokens for r in new}
    computed.update(zip(cached.req_ids, cached.num_computed_tokens))
    lens = {**{r.req_id: r.prompt_len for r in new}, **prompt_lens}
    scheduled = scheduler_output.num_scheduled_tokens
    decoding = [r for r, n in scheduled.items() if n == 1 and computed[r] >= lens[r]]
    return Composition(sum(scheduled.values()) - len(decoding), len(decoding),
                       sum(computed[r] for r in scheduled), len(scheduled))


@dataclass(frozen=True)
class Scenario:
    """``batch`` sequences of ``context`` prompt tokens decode for ``decode_steps`` steps
    (none when ``batch`` is 0), then ``repeats`` times each: ``prompts`` requests of each
    length in ``prompt_lens`` arrive together and are prefilled (one output token)."""

    batch: int = 0
    context: int = 0
    decode_steps: int = 0
    prompts: int = 1
    prompt_lens: tuple[int, ...] = ()
    repeats: int = 1

    def label(self) -> str:
        parts = [f"decode {self.batch} x {self.context}"] if self.batch else []
        if self.prompt_lens:
            parts.append(f"prefill {self.prompts} x {'/'.join(map(str, self.prompt_lens))}")
        return " + ".join(parts)


def _powers_of_two(top: int) -> list[int]:
    return sorted({2**i for i in range(int(math.log2(top)) + 1)} | {top})


def grid(limits: Limits, *, quick: bool = False, prefill_tok_s: float | None = None) -> list[Scenario]:
    """The scenarios to measure, bounded by the engine's limits (pure).

    Prefill: 16 tokens doubling to the step budget (then once beyond: chunks with context),
    1, 4 and 16 prompts a step. Decode: batches doubling to ``max_num_seqs`` at a short
    context (128), and at long ones (a quarter, on long models also a 16th, of the model
    length) while the batch's prefill takes under ``LONG_PREFILL_S`` at ``prefill_tok_s``;
    all within 80% of the KV cache. Mixed: prompts arriving in decoding batches of 1, 8
    and ``max_num_seqs``. ``quick``: fewer points and repeats."""
    budget, top_len = limits.max_num_batched_tokens, limits.max_model_len - 1
    repeats, steps = (2, 3) if quick else (3, 5)
    lens = [n for n in _powers_of_two(min(budget, top_len)) if n >= 16][:: 3 if quick else 1]
    if top_len > budget:
        lens.append(min(2 * budget, top_len))  # chunked prefill
    scenarios = [Scenario(prompt_lens=tuple(lens), repeats=repeats)]
    for k in (4,) if quick else (4, 16):
        fitting = tuple(n for n in (32, 128, 512)[: 2 if quick else 3] if k * n <= budget and k <= limits.max_num_seqs)
        if fitting:
            scenarios.append(Scenario(prompts=k, prompt_lens=fitting, repeats=2))
    batches = sorted(set(_powers_of_two(limits.max_num_seqs)[:: 3 if quick else 1]) | {limits.max_num_seqs})
    short = min(128, top_len // 2)
    contexts = sorted({short, limits.max_model_len // 4}
                      | (set() if quick or limits.max_model_len <= 4096 else {limits.max_model_len // 16}))
    long_tokens = prefill_tok_s * LONG_PREFILL_S[quick] if prefill_tok_s else 8 * budget
    mixed_lens = tuple(n for n in (64, 256, 1024)[: 2 if quick else 3] if n <= budget - limits.max_num_seqs)
    for context in contexts:
        for b in batches:
            if b * (context + steps + 64) > 0.8 * limits.kv_tokens or (context > short and b * context > long_tokens):
                continue
            mixed = context == short and b in {1, 8, limits.max_num_seqs}
            scenarios.append(Scenario(batch=b, context=context, decode_steps=steps,
                                      prompt_lens=mixed_lens if mixed else (), repeats=2))
    return scenarios


def warmup_scenarios(limits: Limits) -> list[Scenario]:
    """A few unrecorded steps of each kind, the largest prefill included."""
    return [Scenario(prompt_lens=(16, min(limits.max_num_batched_tokens, limits.max_model_len - 1))),
            Scenario(batch=min(4, limits.max_num_seqs), context=64, decode_steps=3, prompt_lens=(128,))]


@dataclass(frozen=True)
class Step:
    composition: Composition
    step_s: float


def report(*, hardware: str, model: str, tensor_parallel_size: int, dtype: str, vllm_version: str,
           max_num_seqs: int, max_num_batched_tokens: int, block_size: int, steps: Iterable[Step],
           extra: Mapping | None = None) -> dict:
    """The JSON document the simulator's fitter reads (schema 1; ``extra`` adds keys)."""
    return {"schema": SCHEMA, "hardware": hardware, "cpu_model": cpu_model(), "model": model,
            "tensor_parallel_size": tensor_parallel_size, "dtype": dtype, "vllm_version": vllm_version,
            "engine": {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
                       "block_size": block_size},
            "steps": [{**dataclasses.asdict(s.composition), "step_s": s.step_s, "kind": s.composition.kind}
                      for s in steps],
            **(extra or {})}


def prefill_rate(steps: Iterable[Step]) -> float | None:
    """The best prompt tokens per second of the prefill-only steps, if any (pure)."""
    rates = [s.composition.prefill_tokens / s.step_s for s in steps if s.composition.kind == "prefill"]
    return max(rates, default=None)


def _bucket(n: int) -> int:
    return 2 ** round(math.log2(n)) if n > 0 else 0


def summary(steps: Iterable[Step]) -> list[tuple[str, str, list[float]]]:
    """Step times grouped by kind and size (pure): prefill by prompt and cached tokens, decode by
    sequences and context per sequence, mixed by decoding sequences and prompt tokens,
    sizes rounded to powers of two."""
    groups: dict[tuple, list[float]] = {}
    for s in steps:
        c = s.composition
        if c.kind == "prefill":
            key = (c.kind, _bucket(c.prefill_tokens), _bucket(c.context_tokens))
        elif c.kind == "decode":
            key = (c.kind, c.num_seqs, _bucket(c.context_tokens // c.num_seqs))
        else:
            key = (c.kind, _bucket(c.decode_seqs), _bucket(c.prefill_tokens))
        groups.setdefault(key, []).append(s.step_s)
    names = {"prefill": "~{} prompt tokens, ~{} cached", "decode": "{} seqs, ~{} ctx/seq", "mixed": "~{} decoding + ~{} prompt"}
    rows = sorted(groups.items(), key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1:]))
    return [(kind, names[kind].format(a, b), times) for (kind, a, b), times in rows]


def table(steps: list[Step], title: str) -> Table:
    t = Table("kind", "composition", "steps", "min ms", "p50 ms", "max ms", title=title)
    for kind, name, times in summary(steps):
        ms = np.array(times) * 1e3
        t.add_row(kind, name, str(len(ms)), f"{ms.min():.1f}", f"{np.median(ms):.1f}", f"{ms.max():.1f}")
    return t


# --- the engine -------------------------------------------------------------------------


class StepRecorder:
    """Times each step of one in-process EngineCore by hooking its scheduler's
    ``schedule`` (step starts when it returns) and ``update_from_output`` (step ends)."""

    def __init__(self, scheduler) -> None:
        self.steps: list[Step] = []
        self._pending = None
        schedule, update = scheduler.schedule, scheduler.update_from_output

        def timed_schedule(*args, **kwargs):
            out = schedule(*args, **kwargs)
            lens = {r: scheduler.requests[r].num_prompt_tokens for r in out.num_scheduled_tokens}
            self._pending = (out, lens, time.perf_counter())
            return out

        def timed_update(out, *args, **kwargs):
            end, (pending, self._pending) = time.perf_counter(), (self._pending, None)
            if pending and pending[0] is out and out.total_num_scheduled_tokens:
                self.steps.append(Step(composition(out, pending[1]), end - pending[2]))
            return update(out, *args, **kwargs)

        scheduler.schedule, scheduler.update_from_output = timed_schedule, timed_update


def run_scenario(driver: Driver, s: Scenario) -> None:
    """Drive one scenario to its end: the background batch decodes, the prompts arrive."""
    chunk = driver.limits.max_num_batched_tokens
    injected = s.repeats * sum(1 + math.ceil(s.prompts * n / chunk) for n in s.prompt_lens)
    max_tokens = min(s.decode_steps + injected + 8, driver.limits.max_model_len - s.context)
    background = [driver.add(s.context, max_tokens) for _ in range(s.batch)]
    driver.step_until(lambda: driver.started.issuperset(background))
    until = driver.steps + s.decode_steps
    driver.step_until(lambda: driver.steps >= until)
    for _ in range(s.repeats):
        for n in s.prompt_lens:
            ids = [driver.add(n, 1) for _ in range(s.prompts)]
            driver.step_until(lambda: driver.finished.issuperset(ids))
    driver.engine.abort_request([r for r in background if r not in driver.finished])
    driver.step_until(lambda: not driver.engine.has_unfinished_requests())


def measure(config: StackConfig, *, quick: bool) -> tuple:
    """Start the engine, warm up, run the grid, stop the engine; returns vLLM's resolved
    config, the engine's limits, its warm-up prefill rate and the steps."""
    with in_process_engine(config) as (engine, limits):
        recorder, driver = StepRecorder(engine.engine_core.engine_core.scheduler), Driver(engine, limits)
        with console.status("warming up"):
            for s in warmup_scenarios(limits):
                run_scenario(driver, s)
        rate, recorder.steps = prefill_rate(recorder.steps), []
        scenarios, started = grid(limits, quick=quick, prefill_tok_s=rate), time.monotonic()
        console.print(f"warm-up: prefill at {rate or 0:.0f} tokens/s; {len(scenarios)} scenarios")
        for i, s in enumerate(scenarios, 1):
            with console.status(f"[{i}/{len(scenarios)}] {s.label()}"):
                run_scenario(driver, s)
            console.print(f"[{i}/{len(scenarios)}] {s.label()}: {len(recorder.steps)} steps, "
                          f"{time.monotonic() - started:.0f} s")
        return engine.vllm_config, limits, rate, recorder.steps


def resolve(args: argparse.Namespace) -> StackConfig:
    """The model's stack config with the flags' overrides and prefix caching off."""
    catalog = ModelCatalog(models_dir())
    engine = {k: v for k, v in (("max_num_seqs", args.max_num_seqs),
                                ("max_num_batched_tokens", args.max_num_batched_tokens)) if v is not None}
    data = {"model": args.model, "engine": {**engine, "enable_prefix_caching": False}}
    if args.dtype:
        data["dtype"] = args.dtype
    config = build_stack_config(data, catalog=catalog, model_path=args.model_path or
                                ModelStore(catalog).require(args.model))
    if args.tensor_parallel:
        model = ModelSpec.model_validate({**config.model.model_dump(), "tensor_parallel_size": args.tensor_parallel})
        config = StackConfig.model_validate({**config.model_dump(), "model": model.model_dump()})
    return config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=MODEL, help="a model spec in models/")
    parser.add_argument("--model-path", type=Path, help="weights folder (default: the model store's)")
    parser.add_argument("--tensor-parallel", type=int, help="default: the model spec's")
    parser.add_argument("--dtype", choices=[d.value for d in Dtype], help="default: the model spec's")
    parser.add_argument("--max-num-seqs", type=int, help="default: the model spec's")
    parser.add_argument("--max-num-batched-tokens", type=int, help="default: the model spec's (or vLLM's)")
    parser.add_argument("--hardware", default="cpu", help="label written to the file (cpu, h200, ...)")
    parser.add_argument("--quick", action="store_true", help="fewer points, 2 repeats (under 90 s on a CPU)")
    parser.add_argument("--out", type=Path, help="default: results/step_times-<hardware>[-quick].json")
    args = parser.parse_args()
    if args.tensor_parallel is not None and args.tensor_parallel < 1:
        parser.error("--tensor-parallel must be at least 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the engine's worker too
    out = args.out or REPO / "results" / f"step_times-{args.hardware}{'-quick' if args.quick else ''}.json"
    started, load = time.monotonic(), os.getloadavg()[0]
    try:
        config = resolve(args)
        prepare_process(config, "benchmarks.step_time")
        vllm_config, limits, rate, steps = measure(config, quick=args.quick)
    except ConfigError as exc:
        print(f"step_time: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    import torch
    import vllm

    spec = config.model
    doc = report(hardware=args.hardware, model=spec.name, tensor_parallel_size=spec.tensor_parallel_size,
                 dtype=str(vllm_config.model_config.dtype).removeprefix("torch."), vllm_version=vllm.__version__,
                 max_num_seqs=limits.max_num_seqs, max_num_batched_tokens=limits.max_num_batched_tokens,
                 block_size=vllm_config.cache_config.block_size, steps=steps, extra={
                     "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                     "kv_cache_tokens": limits.kv_tokens, "max_model_len": limits.max_model_len,
                     "quick": args.quick, "warmup_prefill_tok_s": rate and round(rate),
                     "async_scheduling": False, "prefix_caching": False,
                     "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
                     "loadavg_1m": [round(load, 2), round(os.getloadavg()[0], 2)],  # start, end (end counts this run too)
                     "wall_s": round(time.monotonic() - started, 1)})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    console.print(table(steps, f"vLLM step time, {spec.name} on {args.hardware} ({doc['cpu_model']}), "
                               f"TP {spec.tensor_parallel_size}, {doc['dtype']}"))
    console.print(f"{len(steps)} steps written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

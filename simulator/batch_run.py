"""One replica serving requests that all arrive at once, step by step (pure).

What published batch benchmarks measure (vLLM's ``benchmark_latency.py``: one
``LLM.generate`` of a batch; ``benchmark_serving.py`` at request rate ``inf``): every
request is there at time 0, so the scheduler's choices do not depend on how long a step
takes. :func:`run_batch` therefore runs the replica's scheduler once and keeps each
step's composition (the rows of :meth:`StepTimeModel.features`) and each request's first
and last token step; :class:`BatchSteps` turns any coefficients into the benchmark's
figures without scheduling again (what a fit over many coefficient vectors needs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.replica import Replica
from simulator.sequence import Seq
from simulator.step_time import StepShape, StepTimeModel, predict


class _RecordingModel:
    """Delegates to a step-time model and records every committed step's composition."""

    def __init__(self, model: StepTimeModel) -> None:
        self.model = model
        self.rows: list[tuple[float, float, float, float, float]] = []
        self.spans: list[tuple[int, np.ndarray]] = []

    def step_time(self, shape: StepShape) -> float:
        self.rows.append((shape.prefill_tokens, shape.decode_seqs, shape.context_tokens, shape.num_seqs,
                          shape.prefill_context))
        return self.model.step_time(shape)

    def decode_times(self, num_seqs: int, contexts: np.ndarray) -> np.ndarray:
        self.rows.extend((0, num_seqs, float(c), num_seqs, 0.0) for c in contexts)
        return self.model.decode_times(num_seqs, contexts)

    def decode_time(self, num_seqs: int, context: int) -> float:
        self.rows.append((0, num_seqs, context, num_seqs, 0.0))
        return self.model.decode_time(num_seqs, context)


@dataclass(frozen=True)
class BatchSteps:
    """The steps of one batch run and where each request's tokens fall in them."""

    features: np.ndarray  # one row per step: StepTimeModel.features columns
    first_step: np.ndarray  # each request's first-token step
    last_step: np.ndarray  # each request's last-token step
    outputs: np.ndarray  # each request's output tokens

    def step_ends(self, coefficients: np.ndarray) -> np.ndarray:
        """The end time of every step (seconds from the batch's start)."""
        return np.cumsum(predict(self.features, coefficients))

    def figures(self, coefficients: np.ndarray) -> dict[str, float]:
        """latency_s (the last token), median TTFT and TPOT (ms) over the requests, and
        output tokens per second, for ``coefficients``."""
        ends = self.step_ends(coefficients)
        ttft, e2e = ends[self.first_step], ends[self.last_step]
        many = self.outputs > 1
        tpot = (e2e[many] - ttft[many]) / (self.outputs[many] - 1)
        latency = float(ends[-1])
        return {"latency_s": latency, "duration_s": latency, "median_ttft_ms": float(np.median(ttft)) * 1e3,
                "median_tpot_ms": float(np.median(tpot)) * 1e3 if len(tpot) else float("nan"),
                "output_tok_s": float(self.outputs.sum()) / latency}


def run_batch(model: StepTimeModel, prompts: Sequence[int], outputs: Sequence[int], *, num_blocks: int,
              block_size: int, max_num_seqs: int, max_num_batched_tokens: int) -> BatchSteps:
    """Schedule ``prompts[i]`` -> ``outputs[i]`` tokens (all at time 0, no shared prefix)
    on one replica until every request is done."""
    if len(prompts) != len(outputs) or not len(prompts):
        raise ValueError("run_batch needs one output length per prompt, and at least one request")
    recorder = _RecordingModel(model)
    replica = Replica(recorder, num_blocks=num_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens, prefix_caching=False)
    seqs = [Seq(i, int(p), max(int(o), 1), ()) for i, (p, o) in enumerate(zip(prompts, outputs))]
    for seq in seqs:
        replica.add(seq)
    done = 0
    while replica.plan(replica.now) is not None:
        done += len(replica.commit())
    if done != len(seqs) or len(recorder.rows) != replica.step:
        raise RuntimeError(f"batch run stopped early: {done} of {len(seqs)} requests done")
    rows = np.array(recorder.rows, dtype=float)
    features = model.features(*rows.T)
    first = np.array([s.segments[0][0] for s in seqs])
    last = np.array([s.segments[-1][0] + s.segments[-1][1] - 1 for s in seqs])
    return BatchSteps(features, first, last, np.array([s.out_len for s in seqs]))


def run_arrivals(model: StepTimeModel, arrivals: Sequence[float], prompts: Sequence[int], outputs: Sequence[int], *,
                 num_blocks: int, block_size: int, max_num_seqs: int,
                 max_num_batched_tokens: int) -> list[tuple[float, float, int]]:
    """Requests arriving at ``arrivals`` (seconds, ascending) on one replica: each one's
    (first token, last token, tokens) times. A request arriving during a step joins at
    the next one, as in the engine (a decode span is cut at the arrival)."""
    replica = Replica(model, num_blocks=num_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens, prefix_caching=False)
    seqs = [Seq(i, int(p), max(int(o), 1), ()) for i, (p, o) in enumerate(zip(prompts, outputs))]
    pending = list(zip(arrivals, seqs))
    pending.reverse()
    while pending or replica.queue_depth:
        while pending and pending[-1][0] <= replica.now:
            replica.add(pending.pop()[1])
        end = replica.plan(replica.now)
        if end is None:
            replica.now = pending[-1][0]
            continue
        if pending and pending[-1][0] < end:
            replica.interrupt(pending[-1][0])
        replica.commit()
    out = []
    for seq in seqs:
        times = replica.token_times(seq)
        out.append((float(times[0]), float(times[-1]), len(times)))
    return out

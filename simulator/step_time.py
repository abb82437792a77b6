"""Step time of one vLLM replica from its batch's composition (pure).

One engine step runs every scheduled sequence's new tokens through the model once. Its
time, for a model x hardware x tensor-parallel size ``tp`` (per rank; all ranks run in
lock-step)::

    memory  = (W / tp + KV_bytes(context + new tokens) / tp)     / (bandwidth x eff_memory)
    compute = (2 P_layers / tp x tokens + 2 V H / tp x seqs
               + 4 L heads d / tp x attention pairs)               / (peak x eff_compute)
    network = 2 L x [ 2 (tp-1)/tp x tokens H bytes / (link/2 x eff_network) + latency ]
    step    = max(memory, compute) + network + overhead + seq_overhead x seqs

``W`` weight bytes, ``P_layers`` the decoder layers' parameters, ``L`` layers, ``H``
hidden size, ``V`` vocabulary, ``d`` head dim; ``tokens`` = prefill tokens + decode
sequences; the LM head runs once per sequence. The all-reduce is NCCL's ring (two per
layer: after attention and after the MLP) over one direction of the link. Attention
pairs (query x key) are the decode sequences' context plus, for prefill, ``n^2 / 2``
per prefilling sequence with ``n`` the mean chunk (the step-time file carries only
totals). ``max`` rather than a sum: a step streams weights while it computes, and the
slower of the two bounds it (the roofline); the fit decides which bound each measured
step sat on. The effective constants are :class:`simulator.hardware.Efficiencies`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serving.config.model_spec import ModelArchitecture
from simulator.hardware import Efficiencies, HardwareProfile

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}
FEATURES = ("memory", "compute", "network", "allreduces", "overhead", "seqs")
"""Columns of :meth:`StepTimeModel.features`: seconds at efficiency 1, counts, 1, sequences."""


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step's batch, as the step-time file records it (see docs/simulator.md)."""

    prefill_tokens: int
    decode_seqs: int
    context_tokens: int
    num_seqs: int


class StepTimeModel:
    """Seconds per engine step for one replica (see the module docstring)."""

    def __init__(self, arch: ModelArchitecture, hardware: HardwareProfile, *, tensor_parallel: int,
                 dtype: str, ranks_on_node: int | None = None, efficiency: Efficiencies | None = None,
                 slowdown: tuple[float, float] = (1.0, 1.0), seq_s: float = 0.0, noise: float = 0.0,
                 seed: int = 0) -> None:
        self.arch, self.hardware, self.tp = arch, hardware, tensor_parallel
        self.noise = noise  # sigma of a mean-1 lognormal factor on each step (0: deterministic)
        self._rng = np.random.default_rng(seed)
        eff = efficiency or hardware.efficiency
        share = hardware.rank_share(ranks_on_node or tensor_parallel)
        nbytes = DTYPE_BYTES.get(dtype, 2)
        tp = tensor_parallel
        heads_per_rank = max(arch.num_key_value_heads / tp, 1.0)  # KV heads are replicated past tp
        self.kv_bytes_per_token = 2 * arch.num_hidden_layers * heads_per_rank * arch.resolved_head_dim * nbytes
        self.weight_bytes = arch.parameter_count * nbytes / tp
        bandwidth = hardware.memory_bandwidth_gbps.value * 1e9 * share
        peak = hardware.peak_flops(dtype) * share
        self.flops_per_token = 2 * arch.num_hidden_layers * arch.layer_parameters / tp
        self.flops_per_seq = 2 * arch.vocab_size * arch.hidden_size / tp
        self.flops_per_pair = 4 * arch.num_hidden_layers * arch.num_attention_heads * arch.resolved_head_dim / tp
        self.allreduces = 2 * arch.num_hidden_layers if tp > 1 else 0
        one_way = hardware.interconnect_gbps.value * 1e9 / 2
        ring = 2 * (tp - 1) / tp
        self._net_per_token = self.allreduces * ring * arch.hidden_size * nbytes / one_way if tp > 1 else 0.0
        self._per_byte = 1.0 / bandwidth
        self._per_flop = 1.0 / peak
        self.coefficients = np.array([
            1.0 / eff.memory.value, 1.0 / eff.compute.value, 1.0 / eff.network.value,
            eff.allreduce_latency_us.value * 1e-6, eff.step_overhead_ms.value * 1e-3, eff.seq_overhead_us.value * 1e-6,
        ]) * np.repeat(slowdown, 3)  # (memory, compute, network), (all-reduces, step, sequences)
        self.coefficients[5] += seq_s  # the serving path's cost per sequence in the stack (a CPU profile's)
        self._scalars = self.coefficients.tolist()

    def features(self, prefill_tokens, decode_seqs, context_tokens, num_seqs) -> np.ndarray:
        """The model's terms at efficiency 1, one row per step (arrays or scalars in):
        columns :data:`FEATURES`. ``step = max(c0 f0, c1 f1) + c2 f2 + c3 f3 + c4 + c5 f5``."""
        p, d, c, s = (np.asarray(x, dtype=float) for x in (prefill_tokens, decode_seqs, context_tokens, num_seqs))
        tokens = p + d
        prefill_seqs = np.maximum(s - d, 0.0)
        pairs = c + np.where(prefill_seqs > 0, p * p / (2 * np.maximum(prefill_seqs, 1.0)), 0.0)
        memory = (self.weight_bytes + self.kv_bytes_per_token * (c + tokens)) * self._per_byte
        compute = (self.flops_per_token * tokens + self.flops_per_seq * s + self.flops_per_pair * pairs) * self._per_flop
        network = self._net_per_token * tokens
        return np.stack(np.broadcast_arrays(memory, compute, network, np.full_like(memory, self.allreduces),
                                            np.ones_like(memory), s), axis=-1)

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of ``shape`` (:meth:`features` and :func:`predict` in
        plain floats: the simulator calls it once per step with prefill)."""
        p, d, c, s = shape.prefill_tokens, shape.decode_seqs, shape.context_tokens, shape.num_seqs
        k = self._scalars
        tokens = p + d
        prefill_seqs = s - d
        pairs = c + (p * p / (2 * prefill_seqs) if prefill_seqs > 0 else 0.0)
        memory = (self.weight_bytes + self.kv_bytes_per_token * (c + tokens)) * self._per_byte
        compute = (self.flops_per_token * tokens + self.flops_per_seq * s + self.flops_per_pair * pairs) * self._per_flop
        step = (max(memory * k[0], compute * k[1]) + self._net_per_token * tokens * k[2] + self.allreduces * k[3]
                + k[4] + s * k[5])
        return step * self._jitter() if self.noise else step

    def decode_times(self, num_seqs: int, contexts: np.ndarray) -> np.ndarray:
        """Seconds of decode-only steps of ``num_seqs`` sequences whose context totals are
        ``contexts`` (one step each): the fast-forward of a span of decode steps."""
        n, k = float(num_seqs), self._scalars
        memory = (self.weight_bytes + self.kv_bytes_per_token * (contexts + n)) * (self._per_byte * k[0])
        compute = ((self.flops_per_token + self.flops_per_seq) * n + self.flops_per_pair * contexts) * (
            self._per_flop * k[1])
        rest = self._net_per_token * n * k[2] + self.allreduces * k[3] + k[4] + n * k[5]
        steps = np.maximum(memory, compute) + rest
        return steps * self._jitter(len(steps)) if self.noise else steps

    def decode_time(self, num_seqs: int, context: int) -> float:
        """:meth:`decode_times` of one step in plain floats (the same operations, so the
        same float; a short span is cheaper step by step than through numpy)."""
        n, k = float(num_seqs), self._scalars
        memory = (self.weight_bytes + self.kv_bytes_per_token * (context + n)) * (self._per_byte * k[0])
        compute = ((self.flops_per_token + self.flops_per_seq) * n + self.flops_per_pair * context) * (
            self._per_flop * k[1])
        rest = self._net_per_token * n * k[2] + self.allreduces * k[3] + k[4] + n * k[5]
        step = max(memory, compute) + rest
        return step * self._jitter() if self.noise else step

    def _jitter(self, n: int | None = None):
        """Mean-1 lognormal factors of sigma :attr:`noise` (one, or ``n`` as an array)."""
        return self._rng.lognormal(-self.noise**2 / 2, self.noise, n)


def predict(features: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """Step seconds from :meth:`StepTimeModel.features` rows and the 6 coefficients."""
    f, c = features, coefficients
    return (np.maximum(f[..., 0] * c[0], f[..., 1] * c[1]) + f[..., 2] * c[2] + f[..., 3] * c[3]
            + f[..., 4] * c[4] + f[..., 5] * c[5])

"""Step time of one vLLM replica from its batch's composition (pure).

One engine step runs every scheduled sequence's new tokens through the model once. Per
tensor-parallel rank (``tp`` ranks in lock-step), the step is four kinds of kernels run
one after the other, each bound by the slower of the bytes it moves and the FLOPs it
does (a roofline per kind), plus fixed costs::

    linear    = max(W_read / tp / (bandwidth x eff_memory),
                    (2 P_layers / tp x tokens + 2 V H / tp x seqs) / (peak[weights] x eff_compute))
    attention = max(KV_bytes(context + new tokens) / tp / (bandwidth x eff_kv_memory),
                    4 L heads d / tp x pairs / (peak[activations] x eff_attention))
    network   = 2 L x [ 2 (tp-1)/tp x tokens H bytes / (link/2 x eff_network)
                        + latency + latency_per_rank x (tp - 2) ]          (tp > 1)
    step      = linear + attention + network + step_overhead + seq_overhead x seqs

``W_read`` the weights a step reads (the decoder layers and the LM head; the embedding
table only in the rows it looks up), ``P_layers`` the decoder layers' parameters, ``L``
layers, ``H`` hidden size, ``V`` vocabulary, ``d`` head dim; ``tokens`` = prefill tokens
+ decode sequences; the LM head runs once per sequence. Attention is its own roofline:
its KV reads reach a lower share of the bandwidth than the weights' GEMMs (paged,
scattered blocks), and it dominates decode steps over a large KV cache. Attention pairs
(query x key) are the decode sequences' context, each prefill chunk against the
context cached before it (``prefill_context``, chunked prefill) and ``n^2 / 2`` within
a chunk of ``n``. The all-reduce is NCCL's / vLLM's custom ring (two per layer) over one
direction of the link; its latency grows with the ranks it crosses. fp8 weights
(``quantization="fp8"``) read one byte per decoder parameter and run the GEMMs at the
fp8 peak; an fp8 KV cache (``kv_cache_dtype="fp8"``) halves the KV bytes. The effective
constants are :class:`simulator.hardware.Efficiencies`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serving.config.model_spec import ModelArchitecture
from simulator.errors import SimulationConfigError
from simulator.hardware import Efficiencies, HardwareProfile

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2, "fp8": 1}
QUANTIZATIONS = ("fp8",)
KV_CACHE_DTYPES = ("auto", "fp8")
FEATURES = ("weights", "linear", "kv", "attention", "network", "allreduces", "allreduce_ranks", "overhead",
            "seqs")
"""Columns of :meth:`StepTimeModel.features`: seconds at efficiency 1, counts, 1, sequences."""
N_COEFFICIENTS = len(FEATURES)


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step's batch, as the step-time file records it (see docs/simulator.md);
    ``prefill_context``: sum over prefill chunks of chunk x tokens cached before it."""

    prefill_tokens: int
    decode_seqs: int
    context_tokens: int
    num_seqs: int
    prefill_context: float = 0.0


class StepTimeModel:
    """Seconds per engine step for one replica (see the module docstring)."""

    def __init__(self, arch: ModelArchitecture, hardware: HardwareProfile, *, tensor_parallel: int,
                 dtype: str, quantization: str | None = None, kv_cache_dtype: str = "auto",
                 ranks_on_node: int | None = None, efficiency: Efficiencies | None = None,
                 slowdown: tuple[float, float] = (1.0, 1.0), seq_s: float = 0.0, noise: float = 0.0,
                 seed: int = 0) -> None:
        if quantization not in (None, *QUANTIZATIONS):
            raise SimulationConfigError(f"unknown quantization {quantization!r}; known: {', '.join(QUANTIZATIONS)}")
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise SimulationConfigError(
                f"unknown kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(KV_CACHE_DTYPES)}")
        self.arch, self.hardware, self.tp = arch, hardware, tensor_parallel
        self.noise = noise  # sigma of a mean-1 lognormal factor on each step (0: deterministic)
        self._rng = np.random.default_rng(seed)
        eff = efficiency or hardware.efficiency
        share = hardware.rank_share(ranks_on_node or tensor_parallel)
        act = DTYPE_BYTES.get(dtype, 2)  # activations, embeddings, LM head
        layer_bytes = 1 if quantization == "fp8" else act
        kv = 1 if kv_cache_dtype == "fp8" else act
        tp = tensor_parallel
        heads_per_rank = max(arch.num_key_value_heads / tp, 1.0)  # KV heads are replicated past tp
        self.kv_heads_per_rank = heads_per_rank
        self.kv_bytes_per_token = 2 * arch.num_hidden_layers * heads_per_rank * arch.resolved_head_dim * kv
        layers = arch.num_hidden_layers * arch.layer_parameters
        embeddings = arch.vocab_size * arch.hidden_size
        head = 0 if arch.tie_word_embeddings else embeddings
        rest = max(arch.parameter_count - layers - head - embeddings, 0)  # final norm, or a stated total's excess
        self.weight_bytes = (layers * layer_bytes + (embeddings + head + rest) * act) / tp  # held per rank
        self.weight_read_bytes = (layers * layer_bytes + embeddings * act) / tp  # LM head (= tied table) + layers
        bandwidth = hardware.memory_bandwidth_gbps.value * 1e9 * share
        linear_peak = hardware.peak_flops("float8" if quantization == "fp8" else dtype) * share
        attention_peak = hardware.peak_flops(dtype) * share
        self.flops_per_token = 2 * arch.num_hidden_layers * arch.layer_parameters / tp
        self.flops_per_seq = 2 * arch.vocab_size * arch.hidden_size / tp
        self.flops_per_pair = 4 * arch.num_hidden_layers * arch.num_attention_heads * arch.resolved_head_dim / tp
        self.allreduces = 2 * arch.num_hidden_layers if tp > 1 else 0
        one_way = hardware.interconnect_gbps.value * 1e9 / 2
        ring = 2 * (tp - 1) / tp
        self._net_per_token = self.allreduces * ring * arch.hidden_size * act / one_way if tp > 1 else 0.0
        self._allreduce_ranks = self.allreduces * max(tp - 2, 0)
        self._per_byte = 1.0 / bandwidth
        self._linear_per_flop = 1.0 / linear_peak
        self._attention_per_flop = 1.0 / attention_peak
        self._weights_s = self.weight_read_bytes * self._per_byte
        compute, fixed = slowdown  # inside the stack (CPU profiles): x the bytes/FLOP terms, x the fixed costs
        inverse = lambda share: compute / share if share else 0.0  # noqa: E731  (share 0: a term the fit dropped)
        self.coefficients = np.array([
            inverse(eff.fp8_memory_share if quantization == "fp8" else eff.memory.value), inverse(eff.compute.value),
            inverse(eff.kv_memory_share) * (1 + eff.kv_heads_half_value / heads_per_rank),
            inverse(eff.attention_share), inverse(eff.network.value),
            fixed * eff.allreduce_latency_us.value * 1e-6, fixed * eff.allreduce_rank_us * 1e-6,
            fixed * eff.step_overhead_ms.value * 1e-3, fixed * eff.seq_overhead_us.value * 1e-6 + seq_s,
        ])  # seq_s: the serving path's cost per sequence in the stack (a CPU profile's)
        self._scalars = self.coefficients.tolist()

    def features(self, prefill_tokens, decode_seqs, context_tokens, num_seqs, prefill_context=0.0) -> np.ndarray:
        """The model's terms at efficiency 1, one row per step (arrays or scalars in):
        columns :data:`FEATURES`; :func:`predict` combines them with the coefficients."""
        p, d, c, s, x = (np.asarray(v, dtype=float)
                         for v in (prefill_tokens, decode_seqs, context_tokens, num_seqs, prefill_context))
        tokens = p + d
        prefill_seqs = np.maximum(s - d, 0.0)
        pairs = c + x + np.where(prefill_seqs > 0, p * p / (2 * np.maximum(prefill_seqs, 1.0)), 0.0)
        weights = np.full_like(tokens, self._weights_s)
        linear = (self.flops_per_token * tokens + self.flops_per_seq * s) * self._linear_per_flop
        kv = self.kv_bytes_per_token * (c + tokens) * self._per_byte
        attention = self.flops_per_pair * pairs * self._attention_per_flop
        return np.stack(np.broadcast_arrays(
            weights, linear, kv, attention, self._net_per_token * tokens, np.full_like(tokens, self.allreduces),
            np.full_like(tokens, self._allreduce_ranks), np.ones_like(tokens), s), axis=-1)

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of ``shape`` (:meth:`features` and :func:`predict` in
        plain floats: the simulator calls it once per step with prefill)."""
        p, d, c, s = shape.prefill_tokens, shape.decode_seqs, shape.context_tokens, shape.num_seqs
        k = self._scalars
        tokens = p + d
        prefill_seqs = s - d
        pairs = c + shape.prefill_context + (p * p / (2 * prefill_seqs) if prefill_seqs > 0 else 0.0)
        linear = (self.flops_per_token * tokens + self.flops_per_seq * s) * self._linear_per_flop
        kv = self.kv_bytes_per_token * (c + tokens) * self._per_byte
        attention = self.flops_per_pair * pairs * self._attention_per_flop
        step = (max(self._weights_s * k[0], linear * k[1]) + max(kv * k[2], attention * k[3])
                + self._net_per_token * tokens * k[4] + self.allreduces * k[5] + self._allreduce_ranks * k[6]
                + k[7] + s * k[8])
        return step * self._jitter() if self.noise else step

    def _decode_parts(self, n: float) -> tuple[float, float, float, float]:
        """(linear, KV per context token, attention per context token, fixed) of a
        decode-only step of ``n`` sequences, coefficients applied."""
        k = self._scalars
        linear = max(self._weights_s * k[0], (self.flops_per_token + self.flops_per_seq) * n
                     * self._linear_per_flop * k[1])
        fixed = (self._net_per_token * n * k[4] + self.allreduces * k[5] + self._allreduce_ranks * k[6] + k[7]
                 + n * k[8])
        return (linear, self.kv_bytes_per_token * self._per_byte * k[2],
                self.flops_per_pair * self._attention_per_flop * k[3], fixed)

    def decode_times(self, num_seqs: int, contexts: np.ndarray) -> np.ndarray:
        """Seconds of decode-only steps of ``num_seqs`` sequences whose context totals are
        ``contexts`` (one step each): the fast-forward of a span of decode steps."""
        n = float(num_seqs)
        linear, kv, attention, fixed = self._decode_parts(n)
        steps = np.maximum((contexts + n) * kv, contexts * attention) + (linear + fixed)
        return steps * self._jitter(len(steps)) if self.noise else steps

    def decode_time(self, num_seqs: int, context: int) -> float:
        """:meth:`decode_times` of one step in plain floats (the same operations, so the
        same float; a short span is cheaper step by step than through numpy)."""
        n = float(num_seqs)
        linear, kv, attention, fixed = self._decode_parts(n)
        step = max((context + n) * kv, context * attention) + (linear + fixed)
        return step * self._jitter() if self.noise else step

    def _jitter(self, n: int | None = None):
        """Mean-1 lognormal factors of sigma :attr:`noise` (one, or ``n`` as an array)."""
        return self._rng.lognormal(-self.noise**2 / 2, self.noise, n)


def predict(features: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """Step seconds from :meth:`StepTimeModel.features` rows and the coefficients
    (one per column of :data:`FEATURES`)."""
    f, c = features, coefficients
    return (np.maximum(f[..., 0] * c[0], f[..., 1] * c[1]) + np.maximum(f[..., 2] * c[2], f[..., 3] * c[3])
            + f[..., 4:] @ c[4:])

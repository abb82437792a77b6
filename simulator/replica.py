"""One vLLM replica: the V1 scheduler's continuous batching over simulated time (pure).

Each step (``vllm/v1/core/sched/scheduler.py``, ``schedule``) serves, within a token
budget of ``max_num_batched_tokens``:

1. the running sequences in admission order: a decoding one takes one token, a
   prefilling one the rest of its prompt up to the budget (chunked prefill). A token
   needing a new KV block when none is free preempts the most recently admitted
   sequence (recompute: its blocks are freed and it goes back to the front of the
   queue), until the block is found or the needy sequence itself was preempted;
2. if nothing was preempted, waiting sequences in order while the budget lasts and
   fewer than ``max_num_seqs`` run: each takes its longest prefix-cache hit (full
   blocks, at most prompt - 1 tokens), is admitted only if its whole sequence fits in
   the free blocks, and prefills a chunk.

A prefill that completes samples the first token at the end of its step; a decoding
sequence gets one token per step. Step times come from :class:`StepTimeModel`.

Speed: decoding sequences are kept as aggregates (count, context total and a histogram
of ``context mod block_size`` phases, which says how many need a new block at each
step), so a run of decode-only steps (nothing to admit or prefill) is planned in one
go (:meth:`Replica.plan`: with numpy, or step by step in plain floats up to
:data:`SHORT_SPAN_STEPS` steps, the same floats) and cut short when a request arrives
(:meth:`Replica.interrupt`). A sequence's tokens are a run of consecutive steps,
so token times are slices of the replica's step-end times (one growing array).

LoRA (``adapters``, :mod:`simulator.lora`): admission passes over a waiting sequence
whose adapter would exceed ``max_loras`` distinct adapters in the batch (it keeps its
place); a step holding an adapter's sequence takes the profile's ``step_factor`` times
as long, plus the loads and activations it needed.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence

import numpy as np

from simulator.kv_cache import BlockPool
from simulator.lora import AdapterSlots
from simulator.sequence import Seq
from simulator.step_time import StepShape, StepTimeModel

MAX_SPAN_STEPS = 4096
SHORT_SPAN_STEPS = 48  # spans up to this many steps are planned in plain floats (numpy costs more)
PREFIX_UNIT_TOKENS = 128  # prefix-cache granularity (see simulator.kv_cache)


def prefix_unit_tokens(block_size: int) -> int:
    """Tokens per prefix-cache unit: whole blocks, about :data:`PREFIX_UNIT_TOKENS`."""
    return block_size * max(1, PREFIX_UNIT_TOKENS // block_size)


class Replica:
    """A replica's scheduler state, advanced one planned span at a time."""

    def __init__(self, model: StepTimeModel, *, num_blocks: int, block_size: int, max_num_seqs: int,
                 max_num_batched_tokens: int, prefix_caching: bool = True,
                 adapters: AdapterSlots | None = None) -> None:
        self.model, self.bs = model, block_size
        self.adapters = adapters  # LoRA slots and host cache (None: no LoRA)
        self.max_seqs, self.max_tokens = max_num_seqs, max_num_batched_tokens
        self.prefix_caching = prefix_caching
        self.unit_tokens = prefix_unit_tokens(block_size)
        self.ub = self.unit_tokens // block_size  # blocks per prefix-cache unit
        self.kv = BlockPool(num_blocks, self.ub)
        self._times = np.empty(4096)  # end time of each step (the first ``step`` entries)
        self.step = 0  # steps committed
        self.now = 0.0
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.prefilling: list[Seq] = []
        self.n_dec = 0
        self.key_sum = 0
        self.phases = [0] * block_size  # decoding seqs by key mod block_size
        self.finishes: list[tuple[int, int, Seq]] = []
        self.preemptions = 0
        self.prefix_queried = 0  # prompt tokens looked up at admission (a recompute's again, as vLLM)
        self.prefix_hits = 0  # of those, found in the prefix cache
        self.busy_s = 0.0
        self._span: tuple[Sequence[float], Sequence[int]] | None = None  # decode span: step ends, blocks
        self._chunks: list[tuple[Seq, int]] = []  # the planned single step's prefills
        self._step_end = 0.0
        self._decode_alloc_step = -1  # the last step decoding seqs hold blocks for

    # --- queries -------------------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        """Waiting + running, as the engine reports it."""
        return len(self.waiting) + len(self.running)

    def kv_usage(self) -> float:
        return self.kv.used / self.kv.capacity

    # --- arrivals -------------------------------------------------------------------
    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def interrupt(self, t: float) -> float | None:
        """A request arrived at ``t`` during a planned decode span: keep the steps up to
        the one running at ``t``; returns the span's new end (``None``: unchanged)."""
        if self._span is None:
            return None
        ends, blocks = self._span
        keep = bisect_left(ends, t) + 1
        if keep >= len(ends):
            return None
        self._span = (ends[:keep], blocks[:keep])
        return float(ends[keep - 1])

    # --- planning -------------------------------------------------------------------
    def plan(self, t: float) -> float | None:
        """Plan the next step(s) from ``t``; returns when they end (``None``: idle)."""
        self.now = max(self.now, t)
        finishes = self.finishes
        while finishes and not (finishes[0][2].decoding and finishes[0][2].finish_step == finishes[0][0]):
            heapq.heappop(finishes)  # stale: preempted since
        if not self.waiting and not self.prefilling and not self.n_dec:
            return None
        admissible = self.waiting and len(self.running) < self.max_seqs
        if not admissible and not self.prefilling and self.n_dec:
            span = self._plan_decode_span()
            if span is not None:
                return span
        return self._plan_step()

    def _plan_decode_span(self) -> float | None:
        s0, n = self.step, self.n_dec
        horizon = min(self.finishes[0][0] - s0 + 1, MAX_SPAN_STEPS)
        if horizon <= SHORT_SPAN_STEPS:
            return self._plan_short_span(s0, n, horizon)
        steps = np.arange(s0, s0 + horizon)
        needs = np.asarray(self.phases)[(-steps) % self.bs]
        blocks = needs.cumsum()
        fit = int(blocks.searchsorted(self.kv.free, side="right"))
        if fit == 0:
            return None
        if fit < horizon:
            steps, blocks = steps[:fit], blocks[:fit]
        times = self.model.decode_times(n, self.key_sum + n * steps)
        if self.adapters is not None:
            times *= self.adapters.step_factor
        ends = times.cumsum()
        ends += self.now
        self._span = (ends, blocks)
        return float(ends[-1])

    def _plan_short_span(self, s0: int, n: int, horizon: int) -> float | None:
        """:meth:`_plan_decode_span` step by step in plain floats (the same floats: the
        step times of :meth:`StepTimeModel.decode_time`, summed in order)."""
        phases, bs, free = self.phases, self.bs, self.kv.free
        decode_time, base, now = self.model.decode_time, self.key_sum, self.now
        factor = self.adapters.step_factor if self.adapters is not None else 1.0
        ends: list[float] = []
        blocks: list[int] = []
        taken = 0
        elapsed = 0.0
        for s in range(s0, s0 + horizon):
            taken += phases[-s % bs]
            if taken > free:
                break
            elapsed += decode_time(n, base + n * s) * factor
            ends.append(now + elapsed)
            blocks.append(taken)
        if not ends:
            return None
        self._span = (ends, blocks)
        return ends[-1]

    def _plan_step(self) -> float | None:
        s, bs, kv = self.step, self.bs, self.kv
        budget = self.max_tokens
        preempted = False
        need = self.phases[(-s) % bs] if self.n_dec else 0
        if need <= kv.free:
            kv.take_anonymous(need)
        else:
            preempted = self._grow_decodes_preempting(s)
        self._decode_alloc_step = s
        budget -= self.n_dec
        chunks: list[tuple[Seq, int]] = []
        for seq in list(self.prefilling):
            if seq not in self.prefilling:
                continue  # preempted for an earlier one
            if budget <= 0:
                break
            chunk = min(seq.num_tokens - seq.computed, budget)
            if not self._allocate(seq, chunk):
                preempted = True
                if seq not in self.prefilling:
                    break  # it preempted itself: nothing more can run
            chunks.append((seq, chunk))
            budget -= chunk
        if not preempted:
            budget = self._admit(budget, chunks)
        self._chunks = chunks
        if not chunks and not self.n_dec:
            return None
        prefill = sum(c for _, c in chunks)
        context = self.key_sum + self.n_dec * s + sum(seq.computed for seq, _ in chunks)
        shape = StepShape(prefill, self.n_dec, context, self.n_dec + len(chunks),
                          float(sum(seq.computed * chunk for seq, chunk in chunks)))
        self._span = None
        step = self.model.step_time(shape)
        if self.adapters is not None:  # the LoRA kernels, and adapters loaded inside this step
            step = step * self.adapters.step_factor + self.adapters.use(self.adapters.running)
        self._step_end = self.now + step
        return self._step_end

    def _admit(self, budget: int, chunks: list[tuple[Seq, int]]) -> int:
        bs, kv, unit, slots = self.bs, self.kv, self.unit_tokens, self.adapters
        skipped = 0  # waiting seqs passed over: their adapter would exceed max_loras (they keep their place)
        while len(self.waiting) > skipped and budget > 0 and len(self.running) < self.max_seqs:
            seq = self.waiting[skipped]
            if slots is not None and not slots.admits(seq.adapter):
                skipped += 1
                continue
            total = seq.num_tokens
            hit = 0
            if self.prefix_caching:
                hit = min(kv.cached_prefix(seq.hashes), (total - 1) // unit)
            hit_hashes = seq.hashes[:hit]
            if -(-total // bs) - hit * self.ub + kv.revivals(hit_hashes) > kv.free:
                break  # the whole sequence must fit (scheduler_reserve_full_isl)
            del self.waiting[skipped]
            if slots is not None:
                slots.start(seq.adapter)
            self.prefix_queried += total
            self.prefix_hits += hit * unit
            kv.take_hashed(hit_hashes)
            seq.held_hashed, seq.anon, seq.computed = hit, 0, hit * unit
            chunk = min(total - seq.computed, budget)
            self._allocate(seq, chunk)
            self.running.append(seq)
            self.prefilling.append(seq)
            chunks.append((seq, chunk))
            budget -= chunk
        return budget

    def _allocate(self, seq: Seq, chunk: int) -> bool:
        """Blocks for ``seq``'s next ``chunk`` tokens, preempting from the tail if
        needed; ``False`` if something was preempted (maybe ``seq`` itself)."""
        kv, ub = self.kv, self.ub
        end = seq.computed + chunk
        full = min(end // self.unit_tokens, len(seq.hashes)) if self.prefix_caching else 0
        hashed = max(full, seq.held_hashed)
        anon = -(-end // self.bs) - hashed * ub  # a unit just filled stops being anonymous
        ok = True
        while (hashed - seq.held_hashed) * ub + anon - seq.anon > kv.free:
            ok = False
            victim = self.running[-1]
            self._preempt(victim)
            if victim is seq:
                return False
        if hashed > seq.held_hashed:
            kv.release((), seq.anon)
            kv.take_hashed(seq.hashes[seq.held_hashed:hashed])
            seq.held_hashed, seq.anon = hashed, 0
        kv.take_anonymous(anon - seq.anon)
        seq.anon = anon
        return ok

    def _grow_decodes_preempting(self, s: int) -> bool:
        """The slow path of a decode step short of blocks (see the module docstring)."""
        preempted = False
        self._decode_alloc_step = s - 1  # seqs not reached yet hold no block for step s
        for seq in list(self.running):
            if not seq.decoding or (seq.key + s) % self.bs or seq not in self.running:
                continue
            while self.kv.free < 1:
                victim = self.running[-1]
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq in self.running:
                self.kv.take_anonymous(1)
        return preempted

    def _preempt(self, seq: Seq) -> None:
        self.running.remove(seq)
        if self.adapters is not None:
            self.adapters.stop(seq.adapter)
        if seq.decoding:
            self._stop_decoding(seq, self.step - 1)
        elif seq in self.prefilling:
            self.prefilling.remove(seq)
        self.kv.release(seq.hashes[:seq.held_hashed], seq.anon)
        seq.held_hashed = seq.anon = seq.computed = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def _stop_decoding(self, seq: Seq, last_step: int) -> None:
        """``seq`` leaves the decode set; its tokens so far end at ``last_step``."""
        seq.decoding = False
        self.n_dec -= 1
        self.key_sum -= seq.key
        self.phases[seq.key % self.bs] -= 1
        seq.computed = seq.key + last_step + 1
        seq.anon = -(-(seq.key + self._decode_alloc_step + 1) // self.bs) - seq.held_hashed * self.ub
        seq.generated += last_step - seq.seg_start
        seq.segments.append((seq.seg_start, last_step - seq.seg_start + 1))
        seq.finish_step = -1

    # --- committing -----------------------------------------------------------------
    def commit(self) -> list[Seq]:
        """Apply the planned step(s) (up to any interruption); returns the finished seqs."""
        if self._span is not None:
            ends, blocks = self._span
            self._span = None
            self.kv.take_anonymous(int(blocks[-1]))
            self._decode_alloc_step = self.step + len(ends) - 1
            end = float(ends[-1])
            self.busy_s += end - self.now
            self._record(ends)
            self.now = end
        else:
            self.busy_s += self._step_end - self.now
            self._record((self._step_end,))
            self.now = self._step_end
            self._finish_prefills()
        return self._pop_finished()

    def _record(self, ends: Sequence[float]) -> None:
        """Append step end times (the buffer doubles when full; earlier views stay valid)."""
        first, last = self.step, self.step + len(ends)
        if last > len(self._times):
            grown = np.empty(max(2 * len(self._times), last))
            grown[:first] = self._times[:first]
            self._times = grown
        if last == first + 1:
            self._times[first] = ends[0]
        else:
            self._times[first:last] = ends
        self.step = last

    def _finish_prefills(self) -> None:
        s = self.step - 1
        for seq, chunk in self._chunks:
            if seq not in self.prefilling:
                continue
            seq.computed += chunk
            if seq.computed < seq.num_tokens:
                continue
            self.prefilling.remove(seq)
            seq.generated += 1
            seq.seg_start = s
            if seq.generated >= seq.out_len:
                seq.segments.append((s, 1))
                heapq.heappush(self.finishes, (s, seq.rid, seq))
                continue
            seq.decoding = True
            seq.key = seq.computed - (s + 1)
            self.n_dec += 1
            self.key_sum += seq.key
            self.phases[seq.key % self.bs] += 1
            seq.finish_step = s + seq.out_len - seq.generated
            heapq.heappush(self.finishes, (seq.finish_step, seq.rid, seq))
        self._chunks = []

    def _pop_finished(self) -> list[Seq]:
        done = []
        last = self.step - 1
        while self.finishes and self.finishes[0][0] <= last:
            step, _, seq = heapq.heappop(self.finishes)
            if seq.decoding:
                if seq.finish_step != step:
                    continue  # a stale entry of a preempted sequence
                self._stop_decoding(seq, step)
            elif seq.generated < seq.out_len or seq not in self.running:
                continue
            self.running.remove(seq)
            if self.adapters is not None:
                self.adapters.stop(seq.adapter)
            self.kv.release(seq.hashes[:seq.held_hashed], seq.anon)
            seq.held_hashed = seq.anon = 0
            done.append(seq)
        return done

    def step_times(self) -> np.ndarray:
        """The end time of every committed step (read-only)."""
        view = self._times[:self.step]
        view.flags.writeable = False
        return view

    def token_times(self, seq: Seq) -> np.ndarray:
        """The end times of the steps that produced ``seq``'s tokens (not to be modified:
        a view of the replica's step times when they are one run of steps)."""
        times = self._times
        if len(seq.segments) == 1:
            a, n = seq.segments[0]
            view = times[a:a + n]
            view.flags.writeable = False
            return view
        return np.concatenate([times[a:a + n] for a, n in seq.segments])

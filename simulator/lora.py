"""LoRA adapters in one simulated vLLM replica: batch slots, the host cache and their
costs (pure).

What vLLM 0.32 does, and what is modelled of it:

- **Slots** (``max_loras``): one engine batch holds at most that many distinct adapters.
  The V1 scheduler (``vllm/v1/core/sched/scheduler.py``) *skips* a waiting request whose
  adapter would make one more (it stays waiting, the requests behind it may go first):
  :meth:`AdapterSlots.admits`.
- **Host cache** (``max_cpu_loras``, an LRU): the worker's adapter manager keeps that
  many adapters loaded in host memory; a replica loads every declared adapter before it
  takes traffic, as serving's do (the last ``max_cpu_loras`` stay: :meth:`AdapterSlots.preload`);
  a batch that needs one more reads it from disk
  (``load``) and evicts the least recently used; an adapter not in a slot is copied
  into one (``activate``). Both happen inside the forward step that first needs them,
  so they delay every request of that step (:meth:`AdapterSlots.use`).
- **Step cost**: a step whose batch holds any adapter's sequence runs the LoRA kernels
  over the batch and takes ``step_factor`` times the base model's step time (fitted on
  the CPU engine; published figures for GPUs, labelled assumed).

Requests name their adapter by a small integer (0: the base model).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from serving.config.model_spec import ModelArchitecture
from simulator.errors import SimulationConfigError

BASE = 0  # the adapter id of a base-model request


def numbered_adapters(count: int) -> tuple[str, ...]:
    """``count`` adapter names for a plan that needs only how many: ``adapter-1`` ... ``adapter-N``."""
    return tuple(f"adapter-{i}" for i in range(1, count + 1))


def adapter_names(value: object) -> object:
    """Adapters given as a count (``3`` or ``"3"``: :func:`numbered_adapters`) or as
    comma-separated names, as a tuple of names; anything else as it is (to validate)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return numbered_adapters(value)
    if isinstance(value, str):
        text = value.strip()
        return numbered_adapters(int(text)) if text.isdigit() else tuple(n.strip() for n in text.split(",") if n.strip())
    return value


def adapter_bytes(arch: ModelArchitecture, rank: int, dtype_bytes: int) -> int:
    """The weights of one adapter of ``rank`` on every linear layer of ``arch`` (the
    attention's q, k, v, o and the MLP's gate, up, down): ``rank x (in + out)`` per layer."""
    h, d, i = arch.hidden_size, arch.resolved_head_dim, arch.intermediate_size
    q, kv = arch.num_attention_heads * d, arch.num_key_value_heads * d
    per_rank = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
    return rank * per_rank * arch.num_hidden_layers * dtype_bytes


class LoraCosts(BaseModel):
    """A hardware profile's LoRA figures, in seconds and a factor (from its ``lora:`` section)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_factor: float = 1.0
    load_s: float = 0.0
    activate_s: float = 0.0


@dataclass
class AdapterCounters:
    """What one replica's adapters did (cumulative)."""

    loads: int = 0  # read from disk into the host cache
    evictions: int = 0  # dropped from the host cache to make room
    activations: int = 0  # copied into a batch slot
    slot_skips: int = 0  # a waiting request passed over: its adapter would exceed max_loras
    stall_s: float = 0.0  # step time spent loading and activating

    def add(self, other: AdapterCounters) -> None:
        """Add ``other``'s counts to these."""
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


class AdapterSlots:
    """One replica's adapter slots and host cache (see the module docstring)."""

    def __init__(self, max_loras: int, host_slots: int, costs: LoraCosts) -> None:
        if max_loras < 1 or host_slots < max_loras:
            raise SimulationConfigError(f"LoRA: max_loras {max_loras} must be >= 1 and <= max_cpu_loras {host_slots}")
        self.max_loras, self.host_slots, self.costs = max_loras, host_slots, costs
        self._host: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self._slots: OrderedDict[int, None] = OrderedDict()
        self.running: dict[int, int] = {}  # adapter -> its sequences running (the base's not counted)
        self.counters = AdapterCounters()

    def preload(self, adapters: Iterable[int]) -> None:
        """Load ``adapters`` into the host cache in this order before any traffic (the last
        ``host_slots`` stay): no stall and no count, since no request waits for them."""
        for adapter in adapters:
            self._host[adapter] = None
            self._host.move_to_end(adapter)
            if len(self._host) > self.host_slots:
                self._host.popitem(last=False)

    def admits(self, adapter: int) -> bool:
        """Whether a sequence of ``adapter`` may join the running batch now."""
        ok = adapter == BASE or adapter in self.running or len(self.running) < self.max_loras
        if not ok:
            self.counters.slot_skips += 1
        return ok

    def start(self, adapter: int) -> None:
        """A sequence of ``adapter`` joined the running batch."""
        if adapter != BASE:
            self.running[adapter] = self.running.get(adapter, 0) + 1

    def stop(self, adapter: int) -> None:
        """A sequence of ``adapter`` left the running batch (finished or preempted)."""
        if adapter != BASE:
            left = self.running[adapter] - 1
            if left:
                self.running[adapter] = left
            else:
                del self.running[adapter]

    @property
    def step_factor(self) -> float:
        """The step-time factor of the running batch (1 without adapters)."""
        return self.costs.step_factor if self.running else 1.0

    def use(self, adapters: Iterable[int]) -> float:
        """A step runs ``adapters`` (at most ``max_loras``, as :meth:`admits` keeps
        them): seconds it spends loading and activating those not in a slot."""
        wanted = [a for a in adapters if a != BASE]
        for adapter in wanted:  # first the resident ones, so none of them is the slot given up
            if adapter in self._slots:
                self._slots.move_to_end(adapter)
                self._host.move_to_end(adapter)
        stall = 0.0
        for adapter in wanted:
            if adapter in self._slots:
                continue
            if adapter in self._host:
                self._host.move_to_end(adapter)
            else:
                if len(self._host) >= self.host_slots:
                    evicted, _ = self._host.popitem(last=False)
                    self._slots.pop(evicted, None)
                    self.counters.evictions += 1
                self._host[adapter] = None
                self.counters.loads += 1
                stall += self.costs.load_s
            if len(self._slots) >= self.max_loras:
                self._slots.popitem(last=False)
            self._slots[adapter] = None
            self.counters.activations += 1
            stall += self.costs.activate_s
        self.counters.stall_s += stall
        return stall

    @property
    def resident(self) -> tuple[int, ...]:
        """Adapters in the batch slots, least recently used first."""
        return tuple(self._slots)

    @property
    def cached(self) -> tuple[int, ...]:
        """Adapters in the host cache, least recently used first."""
        return tuple(self._host)

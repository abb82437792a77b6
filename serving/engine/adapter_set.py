"""The LoRA adapters one engine replica serves, kept in step with the stack config.

:meth:`AdapterSet.apply` makes the engine hold exactly the declared adapters: each new
one is checked (:func:`~serving.adapters.checks.check_adapter`) and loaded into the
engine before any request may use it; one that fails is logged and refused by name,
the others serve. A removed adapter takes no new request at once and leaves the engine
when its last request in flight ends, so a removal never cuts an answer. Engine calls
are the two callables given (vLLM's ``add_lora`` / ``remove_lora``), so the logic is
tested without an engine.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from serving.config.adapters import AdapterSpec
from serving.errors import AdapterLoadError, ModelNotFoundError

log = logging.getLogger("serveout.engine")


@dataclass(frozen=True)
class LoadedAdapter:
    """An adapter the engine holds, under the integer id the engine knows it by."""

    spec: AdapterSpec
    engine_id: int


Check = Callable[[AdapterSpec], None]
Load = Callable[[LoadedAdapter], Awaitable[None]]
Unload = Callable[[LoadedAdapter], Awaitable[None]]


class AdapterSet:
    """The adapters of one engine replica, by name."""

    def __init__(self, check: Check, load: Load, unload: Unload) -> None:
        self._check, self._load, self._unload = check, load, unload
        self._loaded: dict[str, LoadedAdapter] = {}
        self.failed: dict[str, str] = {}  # name -> why it is not served
        self._in_flight: Counter[str] = Counter()
        self._leaving: dict[str, LoadedAdapter] = {}  # removed, waiting for their requests
        self._next_id = 1
        self._unloading: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak refs
        self.loads = 0
        self.load_seconds = 0.0

    @property
    def names(self) -> tuple[str, ...]:
        """Adapters ready for requests."""
        return tuple(self._loaded)

    def by_engine_id(self) -> dict[int, str]:
        """The adapters ready for requests, by the integer id the engine knows them by."""
        return {loaded.engine_id: name for name, loaded in self._loaded.items()}

    async def apply(self, adapters: tuple[AdapterSpec, ...]) -> None:
        """Hold exactly ``adapters`` (new ones loaded, changed ones reloaded, others removed)."""
        wanted = {a.name: a for a in adapters}
        for name, loaded in list(self._loaded.items()):
            if wanted.get(name) != loaded.spec:
                del self._loaded[name]
                await self._leave(loaded)
        self.failed = {name: why for name, why in self.failed.items() if name in wanted}
        for name, spec in wanted.items():
            if name not in self._loaded:  # a refused one is tried again: its folder may be fixed
                await self._add(spec)

    async def _add(self, spec: AdapterSpec) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        loaded = LoadedAdapter(spec, self._next_id)
        self._next_id += 1
        try:
            await asyncio.to_thread(self._check, spec)
            await self._load(loaded)
        except Exception as exc:  # the engine's own refusal too: the others keep serving
            reason = str(exc) if isinstance(exc, AdapterLoadError) else f"adapter {spec.name!r}: {exc}"
            self.failed[spec.name] = reason
            log.error(json.dumps({"event": "adapter_refused", "adapter": spec.name, "reason": reason}))
            return
        self._loaded[spec.name] = loaded
        self.failed.pop(spec.name, None)
        self.loads += 1
        self.load_seconds += loop.time() - started
        log.info(json.dumps({"event": "adapter_loaded", "adapter": spec.name,
                             "seconds": round(loop.time() - started, 3)}))

    async def _leave(self, loaded: LoadedAdapter) -> None:
        if self._in_flight[loaded.spec.name]:
            self._leaving[loaded.spec.name] = loaded
        else:
            await self._unload(loaded)

    @contextmanager
    def use(self, name: str) -> Iterator[LoadedAdapter]:
        """The loaded adapter ``name`` for one request, counted in flight while it runs;
        :class:`ModelNotFoundError` (with the reason) when it is not served here."""
        loaded = self._loaded.get(name)
        if loaded is None:
            why = self.failed.get(name)
            raise ModelNotFoundError(f"The model `{name}` is not served: {why}" if why else
                                     f"The model `{name}` is not loaded on this replica", param="model")
        self._in_flight[name] += 1
        try:
            yield loaded
        finally:
            self._in_flight[name] -= 1
            leaving = self._leaving.get(name)
            if not self._in_flight[name] and leaving is not None and leaving.engine_id == loaded.engine_id:
                del self._leaving[name]
                task = asyncio.get_running_loop().create_task(self._unload(leaving))
                self._unloading.add(task)
                task.add_done_callback(self._unloading.discard)

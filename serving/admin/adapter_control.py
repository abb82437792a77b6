"""The running stack's LoRA adapters, changed one request at a time (what the admin
endpoint, :mod:`serving.admin.endpoint`, does).

A change is checked before anything is deployed (the adapter folder against the base
model and ``max_lora_rank``, the new set against the stack's rules), then the stack is
redeployed with it: the adapters travel in the deployments' ``user_config``, so every
engine replica, and one the autoscaler starts later, loads the new one and drops a
removed one, and no engine restarts. An added adapter is then asked for one token; if
the engines refuse it, the change is rolled back and the reason answered: the stack
keeps serving everything else.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from serving.adapters.checks import check_adapter
from serving.config.adapters import AdapterSpec
from serving.config.rollout import TrafficSplit
from serving.config.stack import StackConfig
from serving.errors import AdapterLoadError, ConfigError, InvalidRequestError, ModelNotFoundError

PROBE_TIMEOUT_S = 120


class AdapterControl:
    """Loads and unloads the adapters of the stack ``cluster`` serves, on any of its bases.

    ``recipe(base, name)``: the prepared adapter of base model ``base``'s spec recipe
    ``name`` (a load without a path); ``probe(name)``: None when the stack answers
    ``name``, else why not (:func:`refusal`); ``on_change``: told each config now served."""

    def __init__(self, cluster, config: StackConfig, *, recipe: Callable[[str, str], AdapterSpec],
                 probe: Callable[[str], str | None],
                 on_change: Callable[[StackConfig], None] = lambda _: None) -> None:
        self._cluster, self._config = cluster, config
        self._recipe, self._probe, self._on_change = recipe, probe, on_change
        self._lock = threading.Lock()  # one change at a time

    @property
    def config(self) -> StackConfig:
        return self._config

    def adapters(self) -> list[tuple[str, AdapterSpec]]:
        """Every adapter served, with the name of the base model it runs on."""
        return [(base.model.name, a) for base in self._config.bases for a in base.adapters]

    def load(self, name: str, path: str | None = None, rank: int | None = None,
             base: str | None = None) -> AdapterSpec:
        """Serve adapter ``name`` on base model ``base`` (None: the stack's first) from
        ``path`` (else that base's recipe); the adapter served. Loading one already served
        from the same folder on the same base changes nothing."""
        with self._lock:
            index = self._base_index(base)
            on = self._config.bases[index].model.name
            adapter = self._adapter(on, name, path, rank)
            served = {a.name: (parent, a) for parent, a in self.adapters()}
            if name in served:
                parent, current = served[name]
                if parent == on and current.path == adapter.path:
                    return current
                raise InvalidRequestError(f"adapter {name!r} is already served on {parent} from {current.path}; "
                                          "unload it first", param="lora_name")
            if name in self._config.served_names:
                raise InvalidRequestError(f"{name!r} is a base model's name", param="lora_name")
            changed = self._with_adapters(index, (*self._config.bases[index].adapters, adapter))
            self._check(changed.bases[index], adapter)
            previous = self._config
            self._deploy(changed)
            try:
                why = self._probe(name)
            except httpx.HTTPError as exc:  # no answer in time counts as a refusal
                why = f"no answer to a one-token request ({type(exc).__name__})"
            if why is not None:
                self._deploy(previous)
                raise InvalidRequestError(f"adapter {name!r} was refused by the engines: {why}",
                                          param="lora_path")
            return adapter

    def unload(self, name: str) -> None:
        """Stop serving adapter ``name``: its requests in flight finish, new ones get a 404."""
        with self._lock:
            for index, base in enumerate(self._config.bases):
                if name in base.adapter_names:
                    self._deploy(self._with_adapters(index, tuple(a for a in base.adapters if a.name != name)))
                    return
            served = [a.name for _, a in self.adapters()]
            raise ModelNotFoundError(f"adapter {name!r} is not served; the stack serves "
                                     f"{', '.join(served) or 'no adapter'}", param="lora_name")

    def route(self, splits: tuple[TrafficSplit, ...], *, unload: str | None = None) -> None:
        """Serve the traffic ``splits`` from now on and, in the same change, stop serving
        adapter ``unload`` (a rollout's retired version, which no split sends traffic to)."""
        with self._lock:
            data = self._config.model_dump(mode="json")
            data["splits"] = [s.model_dump(mode="json") for s in splits]
            if unload is not None:
                data["adapters"] = [a for a in data["adapters"] if a["name"] != unload]
            try:
                changed = StackConfig.model_validate(data)
            except ValueError as exc:
                raise InvalidRequestError(str(exc), param="model") from None
            self._deploy(changed)

    def _base_index(self, base: str | None) -> int:
        names = [b.model.name for b in self._config.bases]
        if base is None:
            return 0
        if base not in names:
            raise ModelNotFoundError(f"base model {base!r} is not served; the stack's bases are "
                                     f"{', '.join(names)}", param="base_model_name")
        return names.index(base)

    def _adapter(self, base: str, name: str, path: str | None, rank: int | None) -> AdapterSpec:
        try:
            if path is None:
                return self._recipe(base, name)
            return AdapterSpec(name=name, path=Path(path), rank=rank)
        except (ConfigError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidRequestError(str(exc), param="lora_path" if path else "lora_name") from None

    def _with_adapters(self, index: int, adapters: tuple[AdapterSpec, ...]) -> StackConfig:
        """The stack with base ``index`` (0: its own, else ``more_bases[index - 1]``) serving ``adapters``."""
        data = self._config.model_dump(mode="json")
        listed = [a.model_dump(mode="json") for a in adapters]
        if index == 0:
            data["adapters"] = listed
        else:
            data["more_bases"][index - 1]["adapters"] = listed
        try:
            return StackConfig.model_validate(data)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="lora_name") from None

    def _check(self, base: StackConfig, adapter: AdapterSpec) -> None:
        """The adapter folder, read here as ``base``'s engines would (the files must be on
        every node that runs an engine replica: on one box, they are)."""
        lora = base.engine_settings.lora
        assert lora is not None  # on whenever adapters are served
        try:
            base_config = json.loads((base.model_path / "config.json").read_text())
            check_adapter(adapter, max_lora_rank=lora.max_lora_rank, base_config=base_config)
        except AdapterLoadError as exc:
            raise InvalidRequestError(str(exc), param="lora_path") from None

    def _deploy(self, config: StackConfig) -> None:
        self._cluster.deploy(config)
        self._config = config
        self._on_change(config)


def refusal(url: str, headers: dict[str, str], model: str) -> str | None:
    """None when the stack at ``url`` answers ``model`` one token, else why not."""
    response = httpx.post(f"{url}/v1/chat/completions", headers=headers, timeout=PROBE_TIMEOUT_S,
                          json={"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    if response.status_code == 200:
        return None
    try:
        return response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"

"""The adapters one engine replica holds (AdapterSet), with FAKE engine calls that
record what they were asked: loads before use, refusals by name, deferred removal."""

import asyncio
from pathlib import Path

import pytest

from serving.config.adapters import AdapterSpec
from serving.engine.adapter_set import AdapterSet
from serving.errors import AdapterLoadError, ModelNotFoundError

CLINIC = AdapterSpec(name="clinic", path=Path("/a/clinic"))
PHARMACY = AdapterSpec(name="pharmacy", path=Path("/a/pharmacy"))


class FakeEngine:
    """Records add/remove calls; refuses the names in ``refuse``."""

    def __init__(self, refuse=(), check_fails=()):
        self.calls: list[tuple[str, str, int]] = []
        self.refuse, self.check_fails = set(refuse), set(check_fails)

    def check(self, spec):
        if spec.name in self.check_fails:
            raise AdapterLoadError(f"adapter {spec.name!r}: DoRA adapters are not supported by vLLM")

    async def load(self, loaded):
        if loaded.spec.name in self.refuse:
            raise RuntimeError("engine said no")
        self.calls.append(("load", loaded.spec.name, loaded.engine_id))

    async def unload(self, loaded):
        self.calls.append(("unload", loaded.spec.name, loaded.engine_id))


def adapter_set(engine: FakeEngine) -> AdapterSet:
    return AdapterSet(engine.check, engine.load, engine.unload)


def test_apply_loads_each_new_adapter_once_under_its_own_id():
    async def go():
        engine = FakeEngine()
        adapters = adapter_set(engine)
        await adapters.apply((CLINIC, PHARMACY))
        await adapters.apply((CLINIC, PHARMACY))  # nothing changed: nothing loads
        assert engine.calls == [("load", "clinic", 1), ("load", "pharmacy", 2)]
        assert adapters.names == ("clinic", "pharmacy") and adapters.loads == 2 and adapters.load_seconds >= 0
        with adapters.use("pharmacy") as loaded:
            assert loaded.engine_id == 2

    asyncio.run(go())


def test_a_refused_adapter_is_named_with_its_reason_and_the_others_serve():
    async def go():
        engine = FakeEngine(refuse={"pharmacy"}, check_fails={"dora"})
        adapters = adapter_set(engine)
        await adapters.apply((CLINIC, PHARMACY, AdapterSpec(name="dora", path=Path("/d"))))
        assert adapters.names == ("clinic",)
        assert "DoRA" in adapters.failed["dora"] and "engine said no" in adapters.failed["pharmacy"]
        with pytest.raises(ModelNotFoundError, match="DoRA"):
            with adapters.use("dora"):
                pass
        with pytest.raises(ModelNotFoundError, match="not loaded"):
            with adapters.use("unknown"):
                pass
        engine.refuse.clear()
        await adapters.apply((CLINIC, PHARMACY))  # tried again; a dropped failure is forgotten
        assert adapters.names == ("clinic", "pharmacy") and adapters.failed == {}

    asyncio.run(go())


def test_a_changed_folder_reloads_under_a_new_id():
    async def go():
        engine = FakeEngine()
        adapters = adapter_set(engine)
        await adapters.apply((CLINIC,))
        await adapters.apply((AdapterSpec(name="clinic", path=Path("/a/clinic-v2")),))
        assert engine.calls == [("load", "clinic", 1), ("unload", "clinic", 1), ("load", "clinic", 2)]

    asyncio.run(go())


def test_a_removed_adapter_leaves_after_its_last_request_and_refuses_new_ones_at_once():
    async def go():
        engine = FakeEngine()
        adapters = adapter_set(engine)
        await adapters.apply((CLINIC, PHARMACY))
        with adapters.use("clinic"):
            await adapters.apply((PHARMACY,))
            assert ("unload", "clinic", 1) not in engine.calls  # its request still runs
            with pytest.raises(ModelNotFoundError):
                with adapters.use("clinic"):
                    pass
        for _ in range(3):
            await asyncio.sleep(0)
        assert engine.calls[-1] == ("unload", "clinic", 1)
        await adapters.apply(())
        assert engine.calls[-1] == ("unload", "pharmacy", 2)  # nothing in flight: at once
        assert adapters.names == ()

    asyncio.run(go())

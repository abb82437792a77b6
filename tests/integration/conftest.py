"""The real stack, started once per session: a local Ray cluster with Serve, and the
serveout app (vLLM CPU engine replicas serving HTTP behind HAProxy, and the router) on
the default model.

Tests ask for a configuration with ``stack.ensure(...)``; the app is redeployed only
when the configuration changes. A change of routing, gateway, keys or autoscaling
settings reconfigures the running engines in place; a change of what an engine is built
from (the model, its engine settings, the mode, the cores of a replica) restarts them
(~1-2 min here), so modules that share an engine run back to back (see
``pytest_collection_modifyitems``). The tests fix the cores per rank
(``settings.replicas``): a new replica count then only adds or stops replicas. A test that leaves the app drained calls
``stack.forget()``: the next ``ensure`` starts it afresh.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from serving.config.loading import build_stack_config
from serving.config.model_spec import ModelCatalog
from serving.config.stack import StackConfig
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.model_store import ModelStore
from tests.integration.settings import BASE, PORT
from tests.paths import REPO


class Stack:
    """The running app; ``ensure(overrides)`` redeploys only when they differ."""

    def __init__(self, cluster: LocalCluster, catalog: ModelCatalog, store: ModelStore) -> None:
        self.cluster, self.catalog, self.store = cluster, catalog, store
        self.config: StackConfig | None = None
        self.url = cluster.url

    def build(self, data: dict) -> StackConfig:
        return build_stack_config(data, catalog=self.catalog, resolve_path=self.store.require,
                                  resolve_adapter=self.store.adapters.spec)

    def ensure(self, data: dict | None = None) -> StackConfig:
        config = self.build(data or BASE)
        if config != self.config:
            self.config = None
            self.cluster.deploy(config, timeout_s=900)
            self.config = config
        return config

    def forget(self) -> None:
        """Delete the app (it was drained, or its replicas were killed): the next
        :meth:`ensure` deploys fresh replicas."""
        if self.config is not None:
            self.cluster.undeploy(self.config.app_name)
        self.config = None

    def metrics_text(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text


def pytest_collection_modifyitems(items):
    """Run integration modules in the order that minimises engine starts (an entry
    ``module::test`` places one test of a module on its own; the rest keep file order)."""
    order = {name: i for i, name in enumerate([
        # The base engines (2 replicas of the default model), reconfigured in place:
        "test_cli", "test_api", "test_errors", "test_openai_features", "test_disconnect", "test_overload",
        "test_loadtest", "test_auth",
        "test_routing", "test_direct_path", "test_faults",
        # 2 -> 1 replica under load, 1 -> 2 -> 1 autoscaled, then the drain of the last one:
        "test_drain::test_scaling_down_under_load_loses_no_stream", "test_autoscaling", "test_drain",
        # other engines:
        "test_adapters", "test_more_bases", "test_gateway_scale_out", "test_tensor_parallel", "test_sweep",
    ])}

    def place(item) -> int:
        if "integration" not in str(item.fspath):
            return -1
        module = Path(str(item.fspath)).stem
        return order.get(f"{module}::{item.originalname}", order.get(module, 99))

    items.sort(key=place)


@pytest.fixture(scope="session")
def cluster():
    options = ClusterOptions(http_port=PORT, log_to_driver=os.environ.get("SERVEOUT_TEST_LOGS") == "1")
    with LocalCluster(options) as c:
        yield c


@pytest.fixture(scope="session")
def stack(cluster) -> Stack:
    catalog = ModelCatalog(REPO / "models")
    return Stack(cluster, catalog, ModelStore(catalog))


@pytest.fixture(scope="module")
def base_stack(stack) -> Stack:
    stack.ensure(BASE)
    return stack


@pytest.fixture(scope="module")
def openai_client(base_stack):
    from openai import OpenAI

    return OpenAI(base_url=f"{base_stack.url}/v1", api_key="unused", timeout=120, max_retries=0)

"""What serveout assumes of Ray's private code, read from the installed Ray (nothing started).

Each test names the function of :mod:`serving.ray_internals` it guards; a Ray
upgrade that moves one of these fails here, not on a cluster."""

from __future__ import annotations

import ast
import inspect
import pickle
import re

from serving import ray_internals
from tests.paths import REPO

NODE = "node-a"


def test_the_pinned_ray_is_the_one_the_private_apis_were_read_from():
    for lock in ("requirements/cpu.lock", "requirements/gpu.lock"):
        pinned = re.search(r"^ray==(\S+)$", (REPO / lock).read_text(), re.M).group(1)
        assert pinned == ray_internals.RAY_VERSION_READ, lock
    assert ray_internals.version_warning() is None  # the installed Ray is that one
    assert "2.61.0" in ray_internals.version_warning("2.61.0")


def test_no_other_module_imports_rays_private_packages():
    found = []
    for package in ("serving", "sweep", "simulator", "loadtest"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == REPO / "serving/ray_internals.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                         else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                found += [f"{path.relative_to(REPO)}: {n}" for n in names
                          if n.startswith("ray.") and ("._private" in n or "context" in n)]
    assert not found


def test_serve_constants_name_the_ha_proxy_switch():
    import ray.serve._private.constants as constants

    assert isinstance(constants.RAY_SERVE_ENABLE_HA_PROXY, bool)
    assert ray_internals.SERVE_CONSTANTS_MODULE == constants.__name__
    assert ray_internals.serve_constants_imported() is constants


def test_a_handle_can_be_initialised_before_options():
    from ray.serve.handle import DeploymentHandle

    assert list(inspect.signature(DeploymentHandle._init).parameters)[0] == "self"


def test_the_drain_call_is_what_serves_router_sends_a_replica():
    from ray.serve._private.replica import ReplicaActor

    params = list(inspect.signature(ReplicaActor.handle_request).parameters)
    assert params[:2] == ["self", "pickled_request_metadata"]
    metadata, args = ReplicaActor._preprocess_request_args(
        None, ray_internals.drain_request_metadata("serveout"), (30.0,))
    assert (metadata.call_method, metadata.app_name, args) == ("drain", "serveout", (30.0,))
    assert not metadata.is_http_request and not metadata.is_streaming
    first, second = (pickle.loads(ray_internals.drain_request_metadata("a")) for _ in range(2))
    assert first.request_id != second.request_id


def test_the_proxy_actor_is_found_and_drained_by_serves_own_names():
    from ray.serve._private.haproxy import HAProxyManager
    from ray.serve._private.proxy import ProxyActor
    from ray.serve._private.proxy_state import ProxyStateManager

    assert ray_internals.serve_namespace() == "serve"
    assert ray_internals.proxy_actor_name(NODE) == ProxyStateManager._generate_actor_name(None, NODE)
    for proxy in (HAProxyManager, ProxyActor):
        assert "draining" in inspect.signature(proxy.update_draining).parameters
        assert callable(proxy.is_drained)


def test_the_controller_client_gives_serves_details():
    from ray.serve._private.client import ServeControllerClient
    from ray.serve.context import _get_global_client

    assert "raise_if_no_controller_running" in inspect.signature(_get_global_client).parameters
    assert callable(ServeControllerClient.get_serve_details)
    # serve_details() itself is not called here: _get_global_client starts Ray when no
    # driver is connected, and the integration tests' cluster must be the first ray.init.

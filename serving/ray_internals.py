"""Every private Ray API serveout uses, in one module, with the Ray version it was read from.

Ray gives no public way to do these few things; each function says what it does and
what an upgrade may break. Read from Ray :data:`RAY_VERSION_READ` (the version pinned in
``requirements/cpu.lock`` and ``gpu.lock``); ``tests/unit/serving/test_ray_internals.py``
checks every name below against the installed Ray, and
:func:`version_warning` says when the installed Ray is another one.

| function | private API | who needs it | what breaks if it moves |
| --- | --- | --- | --- |
| :func:`serve_constants_imported` | ``ray.serve._private.constants`` (``RAY_SERVE_ENABLE_HA_PROXY``) | ``serving.cluster.local`` | the check that Serve was not imported before the HAProxy ingress was switched on |
| :func:`init_handle` | ``DeploymentHandle._init()`` | the direct mode's router | ``.options()`` on a handle initialises it with default settings |
| :func:`serve_details` | ``ray.serve.context._get_global_client`` | the node drain (preStop) | the drain cannot list the node's replicas |
| :func:`serve_namespace`, :func:`proxy_actor_name` | ``SERVE_NAMESPACE``, ``SERVE_PROXY_NAME``, ``format_actor_name`` | the node drain | the drain cannot find a replica or the node's proxy |
| :func:`drain_request_metadata` | ``RequestMetadata`` and ``ReplicaActor.handle_request`` | the node drain | the drain cannot call one chosen replica's ``drain`` |

Two documented behaviours of Ray's private code are relied on without an import:
graceful replica shutdown (``serve/_private/replica.py``
``Replica._perform_graceful_shutdown``, read by ``serving.app_builder``) and the Serve
request router's internals (``serve/_private/request_router``, notes in
``serving.routing.serve_router``).
"""

from __future__ import annotations

import pickle
import sys
import uuid
from collections.abc import Mapping
from types import ModuleType
from typing import Any

RAY_VERSION_READ = "2.60.0"
"""The Ray release the private APIs here were read from."""

SERVE_CONSTANTS_MODULE = "ray.serve._private.constants"


def version_warning(installed: str | None = None) -> str | None:
    """A warning when the installed Ray is not the one these APIs were read from."""
    if installed is None:
        import ray

        installed = ray.__version__
    if installed == RAY_VERSION_READ:
        return None
    return (f"Ray {installed} is installed; serveout's private Ray calls (serving."
            f"ray_internals) were read from Ray {RAY_VERSION_READ}: check them before relying on it")


def serve_constants_imported() -> ModuleType | None:
    """Serve's constants module if Serve was already imported (it reads the environment
    once, at import), else ``None``."""
    return sys.modules.get(SERVE_CONSTANTS_MODULE)


def init_handle(handle) -> None:
    """Initialise a ``DeploymentHandle`` now, with its own settings (a later
    ``.options()`` call would otherwise initialise it with the defaults)."""
    handle._init()


def serve_details() -> Mapping[str, Any] | None:
    """The Serve controller's details of every app (``None``: no controller running)."""
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    return None if client is None else client.get_serve_details()


def serve_namespace() -> str:
    """The Ray namespace Serve's actors live in."""
    from ray.serve._private.constants import SERVE_NAMESPACE

    return SERVE_NAMESPACE


def proxy_actor_name(node_id: str) -> str:
    """The actor name of the Serve proxy (Python proxy or HAProxy manager) of a node."""
    from ray.serve._private.constants import SERVE_PROXY_NAME
    from ray.serve._private.utils import format_actor_name

    return format_actor_name(SERVE_PROXY_NAME, node_id)


def drain_request_metadata(app: str) -> bytes:
    """What Serve's router sends a replica actor's ``handle_request`` for a handle call of
    ``drain`` (pickled ``RequestMetadata``)."""
    from ray.serve._private.common import RequestMetadata

    request_id = uuid.uuid4().hex
    return pickle.dumps(RequestMetadata(request_id=f"drain-{request_id}", internal_request_id=request_id,
                                        call_method="drain", app_name=app))

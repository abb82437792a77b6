"""The one place that turns a :class:`StackConfig` into a Ray Serve application.

``gateway.mode: direct`` (the default): two deployments. ``engine`` (N vLLM replicas,
each in its own placement group, optionally autoscaled on engine queue depth) is the
app's ingress: every replica serves the OpenAI API itself
(:mod:`serving.direct.engine_ingress`). ``router`` is Serve's ingress request router
(:mod:`serving.direct.router`; Ray starts one per node, or
``RAY_SERVE_INGRESS_ROUTER_REPLICAS_PER_NODE``): HAProxy asks it which engine replica
takes each request, then streams between client and replica. Needs Serve's HAProxy
ingress (:data:`serving.cluster.local.DIRECT_INGRESS_ENV` in every Ray process).

``gateway.mode: separate``: ``engine`` behind ``gateway`` (the FastAPI ingress:
``gateway.replicas`` of them, or autoscaled on their own requests in flight; each runs
its own copy of the request router), every token through the gateway. Each further
base model (``more_bases``) is one more engine deployment, ``engine-<name>``, with its
own replicas, autoscaling and request router; the gateway sends a request to the
deployment of the base its ``model`` names.

Changing settings restarts no engine: the engine deployment's ``version`` is a hash of
what its replicas are built from (:func:`engine_version`: the engine config and
serveout's code), and the gateway's settings reach it as ``user_config``
(``reconfigure``), so a redeploy that changes routing, admission, keys or autoscaling
updates the running replicas in place. The sweep calls :func:`build_app` too.

Stopping a replica (scale-down, redeploy, ``serve.delete``): it leaves routing, Serve
waits until its requests have finished, then calls its ``__del__``, and kills it
``graceful_shutdown_timeout_s`` after the stop began in any case (Ray 2.60:
``serve/_private/replica.py`` ``Replica._perform_graceful_shutdown``,
``deployment_state.py`` ``DeploymentReplica.stop`` / ``check_stopped``). A replica
that holds client connections (the direct mode's engine replica, the separate gateway)
gets more than its longest request, so it is never killed with one in flight; an
engine replica behind separate gateways gets ``drain.timeout_s`` (docs/serving.md,
"Shutdown and scale-down").
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ray import serve
from ray.serve import Application

from serving.autoscaling.queue_depth import autoscaling_config
from serving.config.stack import ENGINE_DEPLOYMENT, StackConfig
from serving.engine.placement import engine_runtime_env, placement_bundles
from serving.engine.replica import EngineReplica
from serving.admission.bound import share_of
from serving.direct.engine_ingress import EngineIngress
from serving.gateway.separate import Gateway
from serving.direct.router import RouterIngress
from serving.routing.serve_router import request_router_config

GATEWAY_DEPLOYMENT = "gateway"
ROUTER_DEPLOYMENT = "router"
ON_THE_REPLICAS_LOOP = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}
"""Direct-mode replicas run their code on Serve's own event loop: no thread hop per
streamed message (Serve's default hands every ASGI message from a user thread to its loop)."""
ROUTER_ON_ITS_LOOP = {**ON_THE_REPLICAS_LOOP, "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0"}
"""The router also runs the engine handle's request router on that loop, so the routing
core and the router's own code share one thread (only there: a driver's synchronous
handle calls need the separate loop)."""
ROUTER_MAX_ONGOING = 1000
"""Route calls one router replica takes at once (each is short; it must not throttle
the ingress)."""
SOURCE_ROOT = Path(__file__).resolve().parent

DRAIN_POLL_S = 0.5
"""How often a stopping replica checks whether its requests have finished (Serve's
default of 2 s holds even an idle replica that long)."""
GATEWAY_STOP_GRACE_S = 10.0
"""What the gateway gets beyond its longest request when Serve stops it (tokenising,
the final events)."""


def code_version() -> str:
    """A digest of serveout's serving code (every ``serving/**/*.py``): a new release
    restarts the engines, a redeploy of the same code does not."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE_ROOT.rglob("*.py")):
        digest.update(path.relative_to(SOURCE_ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def engine_version(config: StackConfig) -> str:
    """The engine deployment's Serve ``version``: it changes exactly when a replica would
    be built differently (its constructor argument, its class, serveout's code)."""
    built_from = f"{config.gateway.mode}|{config.engine_replica_config().model_dump_json()}|{code_version()}"
    return hashlib.sha256(built_from.encode()).hexdigest()[:16]


def gateway_stop_budget_s(config: StackConfig) -> float:
    """How long Serve lets a stopping replica that holds client connections run: past
    its longest request (each ends by its deadline), so it is never killed with one in
    flight."""
    return max(config.gateway.request_timeout_s, config.drain.timeout_s) + GATEWAY_STOP_GRACE_S


def engine_stop_budget_s(config: StackConfig) -> float:
    """How long Serve lets a stopping engine replica run before it kills it. The direct
    mode's replica is its requests' gateway (a kill would cut their connections with no
    word to the client): :func:`gateway_stop_budget_s`. Behind separate gateways it gets
    ``drain.timeout_s``; the gateway then ends the requests it cut with an error."""
    return gateway_stop_budget_s(config) if config.gateway.mode == "direct" else config.drain.timeout_s


def engine_deployment_options(config: StackConfig, name: str = ENGINE_DEPLOYMENT) -> dict:
    """The options of the engine deployment ``name`` of a one-base ``config`` (one of
    :attr:`StackConfig.bases`)."""
    bundles = placement_bundles(config)
    options = dict(
        name=name,
        max_ongoing_requests=config.max_ongoing_per_replica,
        ray_actor_options={"num_cpus": bundles[0]["CPU"], "runtime_env": engine_runtime_env(config)},
        placement_group_bundles=bundles,
        placement_group_strategy="STRICT_PACK",
        request_router_config=request_router_config(
            config.resolved_routing, deployment_label=f"{config.app_name}:{name}"
        ),
        health_check_period_s=10,
        health_check_timeout_s=60,
        graceful_shutdown_timeout_s=engine_stop_budget_s(config),
        graceful_shutdown_wait_loop_s=DRAIN_POLL_S,
        # An engine that fails to start (bad model, TP not dividing the heads, out of
        # memory) rarely succeeds on retry; fail the deploy fast with vLLM's error.
        max_constructor_retry_count=2,
        user_config=config.model_dump(mode="json"),  # its adapters, changed without a restart
    )
    if config.autoscaling.enabled:
        options["autoscaling_config"] = autoscaling_config(config.autoscaling)
    else:
        options["num_replicas"] = config.replicas.num_replicas
    return options


def gateway_deployment_options(config: StackConfig) -> dict:
    gateway = config.gateway
    # A replica's largest share of the app's admission bound: with the fewest replicas.
    limit = share_of(gateway.max_in_flight, config.gateway_replicas_at_start)
    options = dict(
        name=GATEWAY_DEPLOYMENT,
        # Serve's own bounds sit well above the gateway's admission limit, so overload
        # is answered by the gateway (429 + OpenAI body) within milliseconds; the proxy's
        # bounded queue (503 past it) only absorbs bursts while the gateway answers.
        max_ongoing_requests=2 * limit + 64,
        max_queued_requests=max(1024, 8 * limit),
        # Every request ends by its deadline (504) and the engines' drain ends theirs, so
        # a gateway Serve stops is never killed with a request in flight.
        graceful_shutdown_timeout_s=gateway_stop_budget_s(config),
        graceful_shutdown_wait_loop_s=DRAIN_POLL_S,
        ray_actor_options={"num_cpus": 0, "resources": dict(gateway.ray_resources),
                           "runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1"}}},
    )
    if gateway.autoscaling.enabled:
        # Serve's default policy on the gateway's own requests in flight.
        options["autoscaling_config"] = {
            "min_replicas": gateway.autoscaling.min_replicas,
            "max_replicas": gateway.autoscaling.max_replicas,
            "target_ongoing_requests": gateway.autoscaling.target_in_flight,
        }
    else:
        options["num_replicas"] = gateway.replicas
    return options


def direct_engine_deployment_options(config: StackConfig) -> dict:
    """The engine deployment's options when each replica is also the ingress: the
    router's choices go through serveout's request router (without the engines' stats in
    its metrics: each replica exports its own), Serve's bounds sit above the replica's
    admission share, so overload is answered by the gateway, and the settings are the
    ``user_config``."""
    options = engine_deployment_options(config)
    options["request_router_config"] = request_router_config(
        config.resolved_routing, deployment_label=f"{config.app_name}:{ENGINE_DEPLOYMENT}", engine_view=False)
    share = share_of(config.gateway.max_in_flight, config.gateway_replicas_at_start)
    options.update(max_ongoing_requests=2 * share + 64, max_queued_requests=max(1024, 8 * share))
    env = options["ray_actor_options"]["runtime_env"]["env_vars"]
    env.update(ON_THE_REPLICAS_LOOP)
    return options


def router_deployment_options(config: StackConfig) -> dict:
    """The router's options: no CPU reserved (it runs beside the proxy on any node); Ray
    decides how many (per node); the settings are the ``user_config``."""
    return dict(
        name=ROUTER_DEPLOYMENT,
        max_ongoing_requests=ROUTER_MAX_ONGOING,
        max_surge_percent=100,  # a restart (new code) starts the new routers before stopping the old
        user_config=config.model_dump(mode="json"),
        ray_actor_options={"num_cpus": 0, "resources": dict(config.gateway.ray_resources),
                           "runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                                                        **ROUTER_ON_ITS_LOOP}}},
    )


def _pinned(deployment: serve.Deployment, config: StackConfig) -> serve.Deployment:
    """``deployment`` with the version :func:`engine_version` gives it. Ray 2.60 took
    ``version`` out of the public options (every imperative ``serve.run`` otherwise gets
    a random one and restarts every replica); Serve's own builders still set it with
    ``_internal=True``, which is what this does."""
    return deployment.options(version=engine_version(config), _internal=True)


def build_app(config: StackConfig) -> Application:
    """The serveout application for ``config`` (deploy with ``serve.run``)."""
    if config.gateway.direct:
        engine = (_pinned(serve.deployment(EngineIngress).options(**direct_engine_deployment_options(config)),
                          config)
                  .bind(config.engine_replica_config(), config.app_name, ENGINE_DEPLOYMENT))
        router = (_pinned(serve.deployment(RouterIngress).options(**router_deployment_options(config)), config)
                  .bind(engine, config.app_name))
        return engine._with_ingress_request_router(router)
    engines = {
        name: _pinned(serve.deployment(EngineReplica).options(**engine_deployment_options(base, name)), base)
        .bind(base.engine_replica_config())
        for name, base in zip(config.engine_deployments, config.bases)
    }
    return serve.deployment(Gateway).options(**gateway_deployment_options(config)).bind(config, engines)


def app_from_args(args: dict) -> Application:
    """Entry point for declarative deploys (``serve run``/``serve deploy``, KubeRay's
    ``serveConfigV2``): ``import_path: serving.app_builder:app_from_args`` with the
    :class:`StackConfig` as plain data in ``args`` (see :mod:`serving.manifests`)."""
    return build_app(StackConfig.model_validate(args))

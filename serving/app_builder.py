"""The one place that turns a :class:`StackConfig` into a Ray Serve application.

Two deployments: ``engine`` (N vLLM replicas, each in its own placement group,
routed by serveout's request router, optionally autoscaled on engine queue depth)
and ``gateway`` (the FastAPI ingress: ``gateway.replicas`` of them, or autoscaled on
their own requests in flight; Serve's proxy spreads requests over them by load, and
each runs its own copy of the request router). With ``gateway.mode: in-engine`` there
is one deployment: every engine replica runs the gateway itself
(:mod:`serving.gateway.in_engine`). The sweep calls :func:`build_app` too.

Stopping a replica (scale-down, redeploy, ``serve.delete``): it leaves routing, Serve
waits until its requests have finished, then calls its ``__del__``, and kills it
``graceful_shutdown_timeout_s`` after the stop began in any case (Ray 2.60:
``serve/_private/replica.py`` ``Replica._perform_graceful_shutdown``,
``deployment_state.py`` ``DeploymentReplica.stop`` / ``check_stopped``). An engine
replica gets ``drain.timeout_s``; the gateway gets more than its longest request, so
it is never killed with one in flight (docs/serving.md, "Shutdown and scale-down").
"""

from __future__ import annotations

from ray import serve
from ray.serve import Application

from serving.autoscaling import autoscaling_config
from serving.config.stack import RoutingSpec, StackConfig
from serving.engine.placement import engine_runtime_env, placement_bundles
from serving.engine.replica import EngineReplica
from serving.gateway.admission import share_of
from serving.gateway.in_engine import EngineIngress
from serving.gateway.ingress import Gateway, gateway_replicas_at_start
from serving.routing.serve_router import request_router_config

ENGINE_DEPLOYMENT = "engine"
GATEWAY_DEPLOYMENT = "gateway"

DRAIN_POLL_S = 0.5
"""How often a stopping replica checks whether its requests have finished (Serve's
default of 2 s holds even an idle replica that long)."""
GATEWAY_STOP_GRACE_S = 10.0
"""What the gateway gets beyond its longest request when Serve stops it (tokenising,
the final events)."""


def resolved_routing(config: StackConfig) -> RoutingSpec:
    """The routing spec the routers get: ``prefix_home`` decided by the gateway count."""
    if config.routing.prefix_home is not None:
        return config.routing
    return config.routing.model_copy(update={"prefix_home": config.gateway.max_replica_count > 1})


def engine_deployment_options(config: StackConfig) -> dict:
    bundles = placement_bundles(config)
    options = dict(
        name=ENGINE_DEPLOYMENT,
        max_ongoing_requests=config.max_ongoing_per_replica,
        ray_actor_options={"num_cpus": bundles[0]["CPU"], "runtime_env": engine_runtime_env(config)},
        placement_group_bundles=bundles,
        placement_group_strategy="STRICT_PACK",
        request_router_config=request_router_config(
            resolved_routing(config), deployment_label=f"{config.app_name}:{ENGINE_DEPLOYMENT}"
        ),
        health_check_period_s=10,
        health_check_timeout_s=60,
        # In-flight requests finish within this, then the engine shuts down; Serve kills
        # the replica at the deadline and the gateway reports the cut requests.
        graceful_shutdown_timeout_s=config.drain.timeout_s,
        graceful_shutdown_wait_loop_s=DRAIN_POLL_S,
        # An engine that fails to start (bad model, TP not dividing the heads, out of
        # memory) rarely succeeds on retry; fail the deploy fast with vLLM's error.
        max_constructor_retry_count=2,
    )
    if config.autoscaling.enabled:
        options["autoscaling_config"] = autoscaling_config(config.autoscaling)
    else:
        options["num_replicas"] = config.replicas.num_replicas
    return options


def gateway_deployment_options(config: StackConfig) -> dict:
    gateway = config.gateway
    # A replica's largest share of the app's admission bound: with the fewest replicas.
    limit = share_of(gateway.max_in_flight, gateway_replicas_at_start(config))
    options = dict(
        name=GATEWAY_DEPLOYMENT,
        # Serve's own bounds sit well above the gateway's admission limit, so overload
        # is answered by the gateway (429 + OpenAI body) within milliseconds; the proxy's
        # bounded queue (503 past it) only absorbs bursts while the gateway answers.
        max_ongoing_requests=2 * limit + 64,
        max_queued_requests=max(1024, 8 * limit),
        # Every request ends by its deadline (504) and the engines' drain ends theirs, so
        # a gateway Serve stops is never killed with a request in flight.
        graceful_shutdown_timeout_s=(
            max(config.gateway.request_timeout_s, config.drain.timeout_s) + GATEWAY_STOP_GRACE_S),
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


def in_engine_deployment_options(config: StackConfig) -> dict:
    """The engine deployment's options when each replica is also the ingress: no
    serveout router (Serve's ingress picks the replica by load), and Serve's bounds
    above the replica's admission share, so overload is answered by the gateway."""
    options = engine_deployment_options(config)
    del options["request_router_config"]
    share = share_of(config.gateway.max_in_flight, gateway_replicas_at_start(config))
    options.update(max_ongoing_requests=2 * share + 64, max_queued_requests=max(1024, 8 * share))
    return options


def build_app(config: StackConfig) -> Application:
    """The serveout application for ``config`` (deploy with ``serve.run``)."""
    if config.gateway.in_engine:
        return (serve.deployment(EngineIngress)
                .options(**in_engine_deployment_options(config))
                .bind(config, ENGINE_DEPLOYMENT))
    engine = (
        serve.deployment(EngineReplica)
        .options(**engine_deployment_options(config))
        .bind(config.engine_replica_config())
    )
    return (
        serve.deployment(Gateway)
        .options(**gateway_deployment_options(config))
        .bind(config, engine, ENGINE_DEPLOYMENT)
    )


def app_from_args(args: dict) -> Application:
    """Entry point for declarative deploys (``serve run``/``serve deploy``, KubeRay's
    ``serveConfigV2``): ``import_path: serving.app_builder:app_from_args`` with the
    :class:`StackConfig` as plain data in ``args`` (see :mod:`serving.manifests`)."""
    return build_app(StackConfig.model_validate(args))

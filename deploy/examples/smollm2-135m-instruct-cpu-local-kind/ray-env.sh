# Rendered by serving.manifests: model smollm2-135m-instruct on target cpu-local-kind.
# Do not edit; change the stack or target file and render again (deploy/README.md).
# Serve settings every Ray process reads at start (serving.manifests.ray_env): on bare VMs,
# RAY_ENV=ray-env.sh deploy/bare-metal/launch.sh head|worker sources it before `ray start`.
export RAY_SERVE_ENABLE_HA_PROXY=1
export RAY_SERVE_INGRESS_REQUEST_ROUTER_FORWARD_BODY=1
export RAY_SERVE_HAPROXY_INGRESS_REQUEST_ROUTER_BUFSIZE=262144
export RAY_SERVE_INGRESS_ROUTER_REPLICAS_PER_NODE=2
export RAY_SERVE_HAPROXY_RETRY_ON='conn-failure empty-response 503'
export RAY_SERVE_HAPROXY_NBTHREAD=2
export RAY_SERVE_HAPROXY_INGRESS_REQUEST_ROUTER_TIMEOUT_S=10
export RAY_SERVE_HAPROXY_METRICS_ENABLED=0
export RAY_SERVE_HAPROXY_OBSERVE_ERROR_LIMIT=1
export RAY_SERVE_HAPROXY_HEALTH_CHECK_INTER=1s
export RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S=330
export RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S=330
export RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S=2
export RAY_worker_niceness=0
export RAY_SERVE_HAPROXY_BINARY_PATH="$(command -v serveout-haproxy)"  # empty: Serve's own HAProxy

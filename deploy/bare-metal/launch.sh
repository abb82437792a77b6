#!/usr/bin/env bash
# Multi-node serveout on bare VMs, without Kubernetes: one Ray head, N workers, and
# the Serve config rendered by `serving render` (serve-config.yaml).
#
#   launch.sh head                      on the head VM (its GPUs/CPUs take engine replicas too)
#   launch.sh worker HEAD_ADDRESS       on each other GPU/CPU VM, e.g. 10.0.0.10
#   launch.sh deploy SERVE_CONFIG       on the head, once the workers joined
#   launch.sh status                    on the head
#   launch.sh stop                      on any VM (`ray stop`: every Ray process of this user)
#
# Ray runs with token authentication (RAY_AUTH_MODE=token): `head` creates the token in
# ~/.ray/auth_token unless one is configured; copy that file to the same path on every
# worker VM (or set RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH, which Ray reads first). The
# dashboard listens on the head's loopback only (it accepts job submissions): run
# `deploy` and `status` on the head, or reach it with `ssh -L 8265:127.0.0.1:8265 HEAD`.
# Serve's proxy listens on every interface of every VM (port 8000, the gateway with its
# API keys): firewall the VMs so that clients reach only that port, and the Ray ports
# (GCS 6379, raylets, object transfer) only from the other VMs.
#
# Every VM needs the same Python environment (the serveout package with its GPU or CPU
# dependencies, e.g. the image of deploy/docker/ or requirements/gpu.lock) and the
# weights at the same path (the rendered model_path, /models/<model> by default: an NFS
# mount or a copy on each VM). Nothing is downloaded at serve time.
#
# UNTESTED on multiple machines (the project's machines are single 2-core boxes that
# must not start a multi-node Ray cluster). Environment:
#   RAY           the `ray` executable (default: ray on PATH)
#   SERVE         the `serve` executable (default: serve on PATH)
#   GCS_PORT      head GCS port (default 6379)
#   METRICS_PORT  Ray's Prometheus port on every node (default 8080)
#   DASHBOARD     dashboard address for `serve deploy` (default http://127.0.0.1:8265)
#   HEAD_ENGINES  1 (default): the head offers its detected GPUs and CPUs to engine
#                 replicas, so 3 VMs x 8 GPUs serve on all 24 GPUs. 0: a dedicated head
#                 VM without engines (--num-cpus=0 --num-gpus=0), as on KubeRay.
set -euo pipefail

RAY="${RAY:-ray}"
SERVE="${SERVE:-serve}"
GCS_PORT="${GCS_PORT:-6379}"
METRICS_PORT="${METRICS_PORT:-8080}"
DASHBOARD="${DASHBOARD:-http://127.0.0.1:8265}"
HEAD_ENGINES="${HEAD_ENGINES:-1}"

# Offline at serve time, for Ray and every process it starts (replicas inherit it);
# Ray's token authentication for every Ray process and CLI call.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=token

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

require_token() {
  if [[ -z "${RAY_AUTH_TOKEN:-}" && -z "${RAY_AUTH_TOKEN_PATH:-}" && ! -s "$HOME/.ray/auth_token" ]]; then
    echo "no Ray token on this VM: copy the head's ~/.ray/auth_token to $HOME/.ray/auth_token" \
      "(or set RAY_AUTH_TOKEN_PATH)" >&2
    exit 2
  fi
}

cmd="${1:-}"
case "$cmd" in
  head)
    # GCS, Serve controller and gateway need no CPU reservation (num_cpus=0), so the head's
    # detected GPUs and CPUs are left to engine replicas unless HEAD_ENGINES=0.
    case "$HEAD_ENGINES" in
      1) resources=() ;;
      0) resources=(--num-cpus=0 --num-gpus=0) ;;
      *) echo "HEAD_ENGINES must be 0 or 1, not '$HEAD_ENGINES'" >&2; exit 2 ;;
    esac
    # Creates ~/.ray/auth_token unless a token is configured (prints the token: not shown).
    "$RAY" get-auth-token --generate >/dev/null
    exec "$RAY" start --head --port="$GCS_PORT" --dashboard-host=127.0.0.1 \
      --metrics-export-port="$METRICS_PORT" "${resources[@]}" --disable-usage-stats
    ;;
  worker)
    [[ $# -eq 2 ]] || usage
    require_token
    # GPUs and CPUs are detected; an engine replica's placement group packs its
    # tensor-parallel ranks onto one worker.
    exec "$RAY" start --address="$2:$GCS_PORT" --metrics-export-port="$METRICS_PORT" \
      --disable-usage-stats
    ;;
  deploy)
    [[ $# -eq 2 && -f "$2" ]] || usage
    exec "$SERVE" deploy "$2" --address "$DASHBOARD"
    ;;
  status)
    "$RAY" status
    exec "$SERVE" status --address "$DASHBOARD"
    ;;
  stop)
    exec "$RAY" stop
    ;;
  *)
    usage
    ;;
esac

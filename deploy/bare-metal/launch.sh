#!/usr/bin/env bash
# Multi-node serveout on bare VMs, without Kubernetes: one Ray head, N workers, and
# the Serve config rendered by `serving render` (serve-config.yaml).
#
#   RAY_ENV=ray-env.sh launch.sh head      on the head VM (its GPUs/CPUs take engine replicas too)
#   RAY_ENV=ray-env.sh launch.sh worker HEAD_ADDRESS   on each other VM, e.g. 10.0.0.10
#   launch.sh deploy SERVE_CONFIG          on the head, once the workers joined
#   launch.sh status                       on the head
#   launch.sh stop                         on any VM (`ray stop`: every Ray process of this user)
#
# RAY_ENV names the ray-env.sh that `serving render` wrote next to serve-config.yaml: the
# Serve settings (HAProxy ingress, routers per node, HAProxy threads) every Ray process
# reads once, at start. `head` and `worker` source it before `ray start` and refuse to
# start without it; render again and restart Ray on every VM when it changes.
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
# GPU VMs need NVIDIA driver R580 or newer (>= 580.65.06, CUDA 13.0's minimum): vLLM 0.32's
# wheels are CUDA 13 builds (deploy/README.md). `head` and `worker` refuse an older driver.
#
# Every VM needs the same Python environment (the serveout package with its GPU or CPU
# dependencies, e.g. the image of deploy/docker/ or requirements/gpu.lock) and the
# weights at the same path (the rendered model_path, /models/<model> by default: an NFS
# mount or a copy on each VM). Nothing is downloaded at serve time.
#
# UNTESTED on multiple machines (the project's machines are single 2-core boxes that
# must not start a multi-node Ray cluster). Environment:
#   RAY_ENV       the rendered ray-env.sh (required by head and worker)
#   RAY           the `ray` executable (default: ray on PATH)
#   SERVE         the `serve` executable (default: serve on PATH)
#   GCS_PORT      head GCS port (default 6379)
#   METRICS_PORT  Ray's Prometheus port on every node (default 8080)
#   DASHBOARD     dashboard address for `serve deploy` (default http://127.0.0.1:8265)
#   NVIDIA_SMI    the `nvidia-smi` executable (default: nvidia-smi on PATH; none = a CPU VM)
#   MIN_DRIVER    the oldest NVIDIA driver accepted (default 580.65.06)
#   HEAD_ENGINES  1 (default): the head offers its detected GPUs and CPUs to engine
#                 replicas, so 3 VMs x 8 GPUs serve on all 24 GPUs. 0: a dedicated head
#                 VM without engines (--num-cpus=0 --num-gpus=0), as on KubeRay.
#   GATEWAYS      gateway replicas this VM hosts (default 0), offered to Ray as the
#                 resource serveout_gateway: N. A serve-config.yaml rendered for a target
#                 with gateway pods has every gateway replica ask for serveout_gateway: 1
#                 (its first lines say so): start the head or workers with GATEWAYS adding
#                 up to the gateway replicas, or they never start.
set -euo pipefail

RAY="${RAY:-ray}"
SERVE="${SERVE:-serve}"
GCS_PORT="${GCS_PORT:-6379}"
METRICS_PORT="${METRICS_PORT:-8080}"
DASHBOARD="${DASHBOARD:-http://127.0.0.1:8265}"
HEAD_ENGINES="${HEAD_ENGINES:-1}"
GATEWAYS="${GATEWAYS:-0}"
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
MIN_DRIVER="${MIN_DRIVER:-580.65.06}"

# Offline at serve time, for Ray and every process it starts (replicas inherit it);
# Ray's token authentication for every Ray process and CLI call.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=token

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

load_serve_env() {
  if [[ -z "${RAY_ENV:-}" || ! -f "$RAY_ENV" ]]; then
    echo "RAY_ENV must name the ray-env.sh rendered with serve-config.yaml (serving render): the Serve" \
      "settings every Ray process reads at start" >&2
    exit 2
  fi
  set -a
  # shellcheck source=/dev/null
  . "$RAY_ENV"
  set +a
}

require_token() {
  if [[ -z "${RAY_AUTH_TOKEN:-}" && -z "${RAY_AUTH_TOKEN_PATH:-}" && ! -s "$HOME/.ray/auth_token" ]]; then
    echo "no Ray token on this VM: copy the head's ~/.ray/auth_token to $HOME/.ray/auth_token" \
      "(or set RAY_AUTH_TOKEN_PATH)" >&2
    exit 2
  fi
}

require_driver() {
  command -v "$NVIDIA_SMI" >/dev/null 2>&1 || return 0  # no NVIDIA tools: a CPU VM
  local found
  found="$("$NVIDIA_SMI" --query-gpu=driver_version --format=csv,noheader | head -n 1)"
  if [[ -z "$found" || "$(printf '%s\n%s\n' "$MIN_DRIVER" "$found" | sort -V | head -n 1)" != "$MIN_DRIVER" ]]; then
    echo "NVIDIA driver '${found:-unknown}' is older than $MIN_DRIVER: vLLM's CUDA 13 wheels need R580+" >&2
    exit 2
  fi
}

gateway_resources=()
offer_gateways() {
  if [[ "$GATEWAYS" =~ ^[1-9][0-9]*$ ]]; then
    gateway_resources=("--resources={\"serveout_gateway\": $GATEWAYS}")
  elif [[ "$GATEWAYS" != 0 ]]; then
    echo "GATEWAYS must be a whole number of gateway replicas, not '$GATEWAYS'" >&2
    exit 2
  fi
}

cmd="${1:-}"
case "$cmd" in
  head)
    load_serve_env
    require_driver
    offer_gateways
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
      --metrics-export-port="$METRICS_PORT" "${resources[@]}" "${gateway_resources[@]}" \
      --disable-usage-stats
    ;;
  worker)
    [[ $# -eq 2 ]] || usage
    load_serve_env
    require_token
    require_driver
    offer_gateways
    # GPUs and CPUs are detected; an engine replica's placement group packs its
    # tensor-parallel ranks onto one worker.
    exec "$RAY" start --address="$2:$GCS_PORT" --metrics-export-port="$METRICS_PORT" \
      "${gateway_resources[@]}" --disable-usage-stats
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

"""``serving``: start, inspect and stop the stack; list and prepare models.

    serving up [--model NAME] [--replicas N] [--routing POLICY] [--host H] [--port P]
               [--api-keys-file PATH [--metrics-public]]
               [--engine null [--null-tokens-per-s N] [--null-ttft-ms M]]
    serving status | serving down | serving exec -- COMMAND...
    serving models list | serving models prepare NAME
    serving adapters list | serving adapters add NAME [--path DIR] | serving adapters remove NAME
    serving rollout start MODEL --canary NAME [--path DIR] [--steps 5,25,50,100] [--wait]
    serving rollout status | serving rollout promote | serving rollout abort
    serving render --model NAME [--config stack.yaml] --target target.yaml --out DIR
    serving drain --local --deployment engine|gateway --timeout-s S [--app NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from serving.config.loading import DEFAULT_MODEL, build_stack_config, merge, read_stack_file
from serving.config.model_spec import Dtype, ModelCatalog
from serving.config.stack import ENGINE_KINDS, NullBackend, RoutingPolicyName, StackConfig
from serving.errors import ConfigError, ServeoutError
from serving.admission.api_keys import KeyEntry, read_keys_file
from serving.cluster.drain_node import add_drain_command
from serving.manifests import add_render_command
from serving.model_store import ModelStore, models_dir
from serving.adapters_cli import add_adapters_command, start_admin_api
from serving.tenancy_cli import add_tenancy_commands
from serving.rollout_cli import add_rollout_command
from serving.run_state import (read_state, request_headers, rerun_in_stack_netns, state_file, update_nodes,
                                write_state)
from serving.cluster.netns import in_loopback_netns, nsenter_prefix, python_argv, reexec_in_loopback_netns
from serving.cluster.nodes import SLOT_RESOURCE

SMOKE_QUESTION = "What is the capital of France?"
console = Console(stderr=True)


def _store() -> ModelStore:
    return ModelStore(ModelCatalog(models_dir()))


# --- models -----------------------------------------------------------------------


def cmd_models_list(_: argparse.Namespace) -> int:
    statuses = _store().statuses()
    cache = statuses[0].path.parent if statuses else None
    table = Table(title="model specs", caption=f"weights cache: {cache}/<name>")
    table.add_column("name", no_wrap=True)  # names are what users copy: never wrap or cut them
    for col in ("device", "TP", "max len", "tested here"):
        table.add_column(col)
    table.add_column("ready", no_wrap=True)
    for st in statuses:
        s = st.spec
        ready = "yes" if st.ready else ("no" if st.preparable_here else "no (cluster download)")
        table.add_row(s.name, s.accelerator.value, str(s.tensor_parallel_size), str(s.max_model_len),
                      "yes" if s.tested_here else "no", ready)
    Console().print(table)
    return 0


def cmd_models_prepare(args: argparse.Namespace) -> int:
    with console.status(f"preparing {args.name}"):
        _store().prepare(args.name, log=lambda m: console.log(m))
    return 0


def prepare_in_subprocess(name: str) -> None:
    """Prepare weights in a child process: keeps torch/transformers out of the Ray driver."""
    subprocess.run(python_argv("serving.cli", ["models", "prepare", name]), check=True)


# --- up / status / down -----------------------------------------------------------


def gateway_bounds(text: str) -> tuple[int, int]:
    """``"1..4"`` -> ``(1, 4)``; a :class:`ConfigError` names the flag otherwise."""
    low, sep, high = text.partition("..")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ConfigError(f"--gateway-autoscale wants MIN..MAX, e.g. 1..4, got {text!r}")
    return int(low), int(high)


def stack_config_from_args(args: argparse.Namespace, store: ModelStore) -> StackConfig:
    data = read_stack_file(Path(args.config)) if args.config else {}
    if args.model:
        data["model"] = args.model
    if args.dtype:
        data["dtype"] = args.dtype
    if args.adapters:
        data["adapters"] = "all" if args.adapters == ["all"] else args.adapters
    overrides = {
        "replicas": {"num_replicas": args.replicas, "cpus_per_rank": args.cpus_per_rank,
                     "node_resource": SLOT_RESOURCE if args.nodes > 1 else None},
        "routing": {"policy": args.routing},
        "gateway": {"host": args.host, "port": args.port, "max_in_flight": args.max_in_flight,
                    "replicas": args.gateway_replicas, "mode": args.gateway_mode,
                    "api_keys_file": args.api_keys_file, "metrics_public": args.metrics_public},
        "drain": {"timeout_s": args.drain_timeout},
    }
    backend = {"kind": args.engine, "tokens_per_s": args.null_tokens_per_s,
               "ttft_s": None if args.null_ttft_ms is None else args.null_ttft_ms / 1000}
    if any(v is not None for v in backend.values()):
        overrides["engine_backend"] = backend
    if args.autoscale:
        overrides["autoscaling"] = {
            "enabled": True, "min_replicas": args.min_replicas, "max_replicas": args.max_replicas,
            "target_queue_per_replica": args.target_queue,
            "upscale_delay_s": args.upscale_delay, "downscale_delay_s": args.downscale_delay,
        }
    if args.gateway_autoscale:
        low, high = gateway_bounds(args.gateway_autoscale)
        overrides["gateway"]["autoscaling"] = {
            "enabled": True, "min_replicas": low, "max_replicas": high,
            "target_in_flight": args.gateway_target_in_flight}
    config = build_stack_config(merge(data, overrides), catalog=store.catalog, resolve_path=store.require,
                                resolve_adapter=store.adapters.spec)
    if args.nodes > 1:
        check_fits_nodes(config, args.nodes, args.slots_per_node)
    keys_file = config.gateway.api_keys_file
    if keys_file is not None and not keys_file.is_absolute():  # the gateway runs elsewhere
        gateway = config.gateway.model_copy(update={"api_keys_file": keys_file.resolve()})
        config = config.model_copy(update={"gateway": gateway})
    return config


def check_fits_nodes(config: StackConfig, nodes: int, slots_per_node: int) -> None:
    """:class:`ConfigError` unless the most replicas ``config`` runs fit the worker nodes'
    accelerator slots (a rank takes one; a replica's ranks share one node)."""
    tp = config.model.tensor_parallel_size
    per_node = slots_per_node // tp
    if config.replicas.node_resource == SLOT_RESOURCE and config.max_replica_count > per_node * (nodes - 1):
        raise ConfigError(
            f"{config.max_replica_count} replica(s) of tensor-parallel size {tp} do not fit {nodes - 1} worker "
            f"node(s) of {slots_per_node} slot(s): raise --nodes or --slots-per-node, or run fewer replicas")


def load_keys(config: StackConfig) -> list[KeyEntry]:
    """The configured keys (checked before anything starts), or [] without a keys file."""
    path = config.gateway.api_keys_file
    return read_keys_file(path, defaults=config.gateway.key_limits, priority=config.gateway.priority) if path else []


def auth_headers(keys: list[KeyEntry]) -> dict[str, str]:
    """What the CLI's own requests (smoke, status) send: the first key, if any."""
    return {"Authorization": f"Bearer {keys[0].key}"} if keys else {}


def describe_auth(config: StackConfig, keys: list[KeyEntry], url: str) -> str:
    if not keys:
        return (f"[bold yellow]NO AUTHENTICATION:[/] anyone who can reach {url} may use it "
                "(--api-keys-file PATH requires API keys)")
    closed = "/v1, /tokenize, /detokenize" + ("" if config.gateway.metrics_public else ", /metrics, /status")
    return (f"API keys: {len(keys)} from {config.gateway.api_keys_file}; {closed} need "
            "`Authorization: Bearer KEY` (/health stays open)")


def smoke_request(url: str, model: str, headers: dict[str, str]) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": SMOKE_QUESTION}],
            "temperature": 0, "max_tokens": 32}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=120)
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def cmd_up(args: argparse.Namespace) -> int:
    if args.nodes < 1 or args.slots_per_node < 1:
        raise ConfigError("--nodes and --slots-per-node must be at least 1")
    # Several nodes on one machine always run in a loopback-only namespace: Ray's ports
    # listen on every interface.
    if (args.isolate_network or args.nodes > 1) and not in_loopback_netns():
        reexec_in_loopback_netns(python_argv("serving.cli", sys.argv[1:]))
    store = _store()
    model = args.model or (read_stack_file(Path(args.config)).get("model") if args.config else None)
    model = model or DEFAULT_MODEL
    if not store.is_ready(model):
        prepare_in_subprocess(model)
    config = stack_config_from_args(args, store)
    keys = load_keys(config)

    from serving.cluster.ingress_env import hard_stop_after
    from serving.cluster.local import ClusterOptions, LocalCluster

    cluster = LocalCluster(ClusterOptions(
        log_to_driver=args.verbose, http_host=config.gateway.host, http_port=config.gateway.port,
        hard_stop_after_s=hard_stop_after(config), nodes=args.nodes, slots_per_node=args.slots_per_node))
    started = time.monotonic()
    try:
        with console.status("starting Ray" + (f" ({args.nodes} nodes)" if args.nodes > 1 else "")) as status:
            cluster.start()
            # After ray.init, which installs an aborting SIGTERM handler; SIGINT too, as a
            # shell ignores it in background jobs (`serving up &`).
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, _interrupt)
            url = cluster.deploy(config, on_progress=lambda s: status.update(f"deploying: {s}"))
        null = " on the null engine (no model)" if isinstance(config.engine_backend, NullBackend) else ""
        console.print(f"[green]serving[/] {config.model.name} with "
                      f"{config.replicas.num_replicas} replica(s){null} at [bold]{url}/v1[/] "
                      f"(ready in {time.monotonic() - started:.0f} s)")
        console.print(describe_auth(config, keys, url))
        for node in cluster.node_records():
            console.print(f"node {node['ip']}{' (head)' if node['head'] else ''}: ingress {node['url']}, "
                          f"ray start pid {node['pid']}")
        admin = start_admin_api(cluster, config, url, keys, store, args.admin_port)
        if args.smoke or args.exit_after_smoke:
            answer = smoke_request(url, config.model.name, auth_headers(keys))
            console.print(f"[bold]Q:[/] {SMOKE_QUESTION}\n[bold]A:[/] {answer}")
        if args.exit_after_smoke:
            return 0
        if in_loopback_netns():
            console.print(f"the stack runs in a loopback-only network namespace; reach it with "
                          f"`{' '.join(nsenter_prefix(os.getpid()))} curl {url}/v1/models` "
                          f"or `serving status`")
        console.print(f"admin endpoint (LoRA adapters, {'an admin key' if keys else 'no key'}): "
                      f"http://{config.gateway.host}:{admin.server_address[1]}/v1/load_lora_adapter")
        console.print("Ctrl-C (or `serving down`) stops it; `serving adapters add|remove` changes its adapters")
        while True:
            time.sleep(NODE_WATCH_S if args.nodes > 1 else 3600)
            _replace_dead_nodes(cluster)
    except KeyboardInterrupt:
        console.print("stopping")
        return 0
    finally:
        with console.status("shutting down"):
            cluster.shutdown()
        state_file().unlink(missing_ok=True)


NODE_WATCH_S = 2.0
"""How often ``serving up --nodes N`` looks for a node that died (to start it again)."""


def _replace_dead_nodes(cluster) -> None:
    """Start again the nodes that died, as Kubernetes would, and record their new PIDs; a
    node that does not come back is said, and tried again at the next look."""
    try:
        replaced = cluster.replace_dead_nodes()
    except ServeoutError as exc:
        console.print(f"[red]a dead node did not start again:[/] {exc}")
        return
    if replaced:
        console.print(f"node(s) {', '.join(replaced)} died and were started again")
        update_nodes(cluster.node_records())


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def cmd_status(args: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    response = httpx.get(f"{state['url']}/status", headers=request_headers(state, status=True), timeout=10)
    if response.status_code != 200:
        raise ServeoutError(f"GET /status answered {response.status_code}: {response.text[:200]}")
    status = response.json()
    if state.get("nodes"):
        status["nodes"] = state["nodes"]
    if args.json:
        print(json.dumps(status))
        return 0
    table = Table(title=f"serveout at {state['url']} (pid {state['pid']})")
    table.add_column("field")
    table.add_column("value")
    for key, value in status.items():
        table.add_row(key, json.dumps(value) if isinstance(value, (dict, list)) else str(value))
    Console().print(table)
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    """Run a command where the running stack's URL is reachable (its network namespace)."""
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise ServeoutError("nothing to run: serving exec -- COMMAND [ARGS...]")
    state = read_state()
    prefix = nsenter_prefix(state["pid"]) if state["netns"] and not in_loopback_netns() else []
    return subprocess.run(prefix + argv).returncode


def cmd_down(_: argparse.Namespace) -> int:
    state = read_state()
    os.kill(state["pid"], signal.SIGTERM)  # handled like Ctrl-C: a clean shutdown
    console.print(f"asked serving up (pid {state['pid']}) to stop")
    return 0


# --- argument parsing --------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serving", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start a local Ray cluster and serve a model")
    up.add_argument("--config", help="stack YAML file (see docs/serving.md)")
    up.add_argument("--model", help=f"model spec name (default {DEFAULT_MODEL})")
    up.add_argument("--dtype", choices=[d.value for d in Dtype],
                    help="override the model spec's dtype (CPU specs use float32: see docs/serving.md)")
    up.add_argument("--adapters", nargs="+", metavar="NAME",
                    help="serve these adapter recipes of the model spec on its replicas (`all`: every one)")
    up.add_argument("--replicas", type=int)
    up.add_argument("--engine", choices=ENGINE_KINDS,
                    help="the engine behind the replicas: vllm (default) or null (no model: streams "
                         "fixed tokens, to measure the serving path alone; see docs/serving.md)")
    up.add_argument("--null-tokens-per-s", type=float,
                    help="null engine: tokens per second per stream (0 = as fast as possible)")
    up.add_argument("--null-ttft-ms", type=float, help="null engine: time to first token (ms)")
    up.add_argument("--cpus-per-rank", type=int)
    up.add_argument("--routing", choices=[p.value for p in RoutingPolicyName])
    up.add_argument("--host")
    up.add_argument("--port", type=int)
    up.add_argument("--max-in-flight", type=int, help="admission bound before 429s (for the whole app)")
    up.add_argument("--gateway-mode", choices=["direct", "separate", "in-engine"],
                    help="direct (default): every engine replica serves HTTP itself and a router picks "
                         "it once per request (HAProxy streams between client and replica); separate: "
                         "gateway replicas in front of the engines (in-engine: replaced by direct)")
    up.add_argument("--gateway-replicas", type=int, metavar="N",
                    help="gateway replicas (default 1); each admits its share of --max-in-flight")
    up.add_argument("--gateway-autoscale", metavar="MIN..MAX",
                    help="autoscale the gateways on their own requests in flight between MIN and MAX")
    up.add_argument("--gateway-target-in-flight", type=int, metavar="N",
                    help="with --gateway-autoscale: requests in flight per gateway replica (default 64)")
    up.add_argument("--drain-timeout", type=float, metavar="SECONDS",
                    help="on shutdown or scale-down, how long requests in flight may finish (default 30)")
    up.add_argument("--api-keys-file", help="require API keys, one per line: `name:key rpm=60 "
                    "tpm=20000 concurrency=4` (see docs/serving.md); without it there is NO auth")
    up.add_argument("--metrics-public", action="store_true", default=None,
                    help="with API keys: serve /metrics and /status without a key")
    up.add_argument("--autoscale", action="store_true", help="scale engines on queue depth")
    up.add_argument("--min-replicas", type=int)
    up.add_argument("--max-replicas", type=int)
    up.add_argument("--target-queue", type=float, help="engine queue per replica to aim for")
    up.add_argument("--upscale-delay", type=float)
    up.add_argument("--downscale-delay", type=float)
    up.add_argument("--smoke", action="store_true", help="send one chat request once ready")
    up.add_argument("--exit-after-smoke", action="store_true", help="stop after the smoke request")
    up.add_argument("--nodes", type=int, default=1, metavar="N",
                    help="N real Ray nodes on loopback addresses: a head and N-1 worker nodes that run "
                    "the engines, each with its own ingress (implies --isolate-network)")
    up.add_argument("--slots-per-node", type=int, default=1, metavar="K",
                    help="with --nodes: accelerator slots per worker node (each tensor-parallel rank "
                    "takes one; default 1)")
    up.add_argument("--isolate-network", action="store_true",
                    help="run inside a loopback-only network namespace (needs root)")
    up.add_argument("--admin-port", type=int, default=0, metavar="PORT",
                    help="the admin endpoint's port (LoRA adapters; default: a free one, shown and recorded)")
    up.add_argument("--verbose", action="store_true", help="show replica logs")
    up.set_defaults(func=cmd_up)

    status = sub.add_parser("status", help="replicas and state of the running stack")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)
    sub.add_parser("down", help="stop the running stack").set_defaults(func=cmd_down)
    run_in = sub.add_parser("exec", help="run a command that can reach the running stack "
                                         "(inside its network namespace if it has one)")
    run_in.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    run_in.set_defaults(func=cmd_exec)

    models = sub.add_parser("models", help="model specs").add_subparsers(dest="models_command", required=True)
    models.add_parser("list", help="specs and whether each is prepared").set_defaults(func=cmd_models_list)
    prep = models.add_parser("prepare", help="build a model's local weights folder")
    prep.add_argument("name")
    prep.set_defaults(func=cmd_models_prepare)
    add_render_command(sub, models_dir=models_dir)
    add_drain_command(sub)
    add_adapters_command(sub)
    add_rollout_command(sub)
    add_tenancy_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ServeoutError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""``serving adapters list | add | remove``: change the LoRA adapters of the stack
``serving up`` runs, without restarting it, through its admin endpoint
(:mod:`serving.admin.endpoint`, which ``serving up`` starts here:
:func:`start_admin_api`).

A change redeploys the same stack with the new adapters: they travel in the
deployments' ``user_config``, so every engine replica (and one the autoscaler starts
later) loads the new ones and drops the removed ones, and no engine restarts
(docs/serving.md, "Many models on one endpoint").
"""

from __future__ import annotations

import argparse
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from prometheus_client import CollectorRegistry

from serving.admin.endpoint import AdminApi, serve_admin_api
from serving.admin.adapter_control import AdapterControl, refusal
from serving.admin.quality_probe import probe_quality
from serving.admin.rollout_control import RolloutControl
from serving.admin.rollout_record import RolloutRecorder
from serving.admission.api_keys import KeyEntry, KeyRing
from serving.cluster.netns import in_loopback_netns
from serving.config.stack import StackConfig
from serving.errors import ServeoutError
from serving.model_store import ModelStore, default_home
from serving.run_state import read_state, request_headers, rerun_in_stack_netns, write_state

console = Console(stderr=True)


def start_admin_api(cluster, config: StackConfig, url: str, keys: list[KeyEntry], store: ModelStore,
                    port: int) -> ThreadingHTTPServer:
    """``serving up``'s admin endpoint on the stack's host, ``port`` (0: a free one);
    each change is recorded in the run state."""
    unrestricted = next((k for k in keys if k.models is None), keys[0] if keys else None)
    headers = {"Authorization": f"Bearer {unrestricted.key}"} if unrestricted else {}
    admin_url: list[str] = []

    def changed(now: StackConfig) -> None:
        write_state(url, now, netns=in_loopback_netns(), admin_url=admin_url[0], nodes=cluster.node_records())
        console.print(f"adapters now: {', '.join(a for b in now.bases for a in b.adapter_names) or 'none'}")

    control = AdapterControl(cluster, config, probe=lambda name: refusal(url, headers, name), on_change=changed,
                             recipe=lambda base, name: store.adapters.spec(store.catalog.get(base), name))
    registry = CollectorRegistry()
    api_key = unrestricted.key if unrestricted else None
    rollouts = RolloutControl(control, RolloutRecorder(registry, config.audit, default_home()), url=url,
                              headers=headers, probe=lambda plan, name: probe_quality(url, name, plan.quality, api_key))
    server = serve_admin_api(AdminApi(control, KeyRing(keys).identify if keys else None, rollouts, registry),
                             config.gateway.host, port)
    admin_url.append(f"http://{config.gateway.host}:{server.server_address[1]}")
    write_state(url, config, netns=in_loopback_netns(), admin_url=admin_url[0], nodes=cluster.node_records())
    return server


def call_admin(state: dict, method: str, path: str, body: dict | None = None) -> dict:
    """One admin endpoint call with the keys file's first admin key; its JSON answer."""
    if not state.get("admin_url"):
        raise ServeoutError("the running stack has no admin endpoint (restart it with this version of serving)")
    response = httpx.request(method, f"{state['admin_url']}{path}", json=body, timeout=None,
                             headers=request_headers(state, admin=True))
    answer = response.json()
    if response.status_code != 200:
        raise ServeoutError(f"the stack refused: {answer['error']['message']}")
    return answer


def probe(state: dict, name: str) -> str:
    """``serving``, or why the stack does not serve adapter ``name`` (one token asked)."""
    why = refusal(state["url"], request_headers(state), name)
    return "serving" if why is None else f"refused: {why}"


def cmd_list(_: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    table = Table(title=f"LoRA adapters of {state['model']} at {state['url']}")
    for column in ("name", "base", "path", "rank", "state"):
        table.add_column(column, overflow="fold")
    for adapter in call_admin(state, "GET", "/v1/lora_adapters")["data"]:
        table.add_row(adapter["id"], adapter["parent"], adapter["path"], str(adapter.get("rank") or "-"),
                      probe(state, adapter["id"]))
    Console().print(table)
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    if not state["adapters"]:
        console.print("LoRA was off: the engines restart with it on (once)")
    path = str(Path(args.path).resolve()) if args.path else None  # serving up's working folder is not ours
    body = {"lora_name": args.name, "lora_path": path, "rank": args.rank, "base_model_name": args.base}
    with console.status(f"loading {args.name} on every replica"):
        call_admin(state, "POST", "/v1/load_lora_adapter", {k: v for k, v in body.items() if v is not None})
    console.print(f"{args.name}: serving")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    with console.status(f"removing {args.name}"):
        call_admin(state, "POST", "/v1/unload_lora_adapter", {"lora_name": args.name})
    console.print(f"{args.name}: removed (its requests in flight finish; new ones get a 404)")
    return 0


def add_adapters_command(sub: argparse._SubParsersAction) -> None:
    """``serving adapters list | add | remove``."""
    adapters = sub.add_parser("adapters", help="the running stack's LoRA adapters (changed without a restart)")
    commands = adapters.add_subparsers(dest="adapters_command", required=True)
    commands.add_parser("list", help="each adapter and whether it serves").set_defaults(func=cmd_list)
    add = commands.add_parser("add", help="serve an adapter (a recipe of the model spec, or --path DIR)")
    add.add_argument("name", help="the model id requests will name")
    add.add_argument("--path", help="a PEFT LoRA folder (default: the spec's recipe NAME, made at set-up)")
    add.add_argument("--rank", type=int, help="its rank, checked against max_lora_rank before it loads")
    add.add_argument("--base", help="the base model it runs on, in a stack of several (default: the first)")
    add.set_defaults(func=cmd_add)
    remove = commands.add_parser("remove", help="stop serving an adapter")
    remove.add_argument("name")
    remove.set_defaults(func=cmd_remove)

"""``serving adapters list | add | remove``: change the LoRA adapters of the stack
``serving up`` runs, without restarting it.

A command writes the adapters it wants served (``run_state.adapters_request_file``)
and signals ``serving up`` (SIGUSR1), which redeploys the same stack with them: the
adapters travel in the deployments' ``user_config``, so every engine replica (and one
the autoscaler starts later) loads the new ones and drops the removed ones, and no
engine restarts (docs/serving.md, "Many models on one endpoint"). The command then
waits for the stack to record the change and asks each added adapter for one token,
to say whether it serves or why it was refused.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import uuid
from collections.abc import Callable

import httpx
from rich.console import Console
from rich.table import Table

from serving.cluster.netns import in_loopback_netns
from serving.config.adapters import AdapterSpec
from serving.config.stack import StackConfig
from serving.errors import ServeoutError
from serving.model_store import ModelStore
from serving.run_state import adapters_request_file, read_state, request_headers, rerun_in_stack_netns, write_state

ADAPTERS_SIGNAL = signal.SIGUSR1
console = Console(stderr=True)


def serve_adapter_requests(cluster, config: StackConfig, url: str) -> None:
    """``serving up``'s wait: forever, redeploying with the requested adapters on each signal."""
    pending: list[bool] = []
    signal.signal(ADAPTERS_SIGNAL, lambda *_: pending.append(True))
    while True:
        time.sleep(0.5)
        if pending:
            pending.clear()
            config = apply_adapter_request(cluster, config, url)


def apply_adapter_request(cluster, config: StackConfig, url: str) -> StackConfig:
    """Redeploy ``config`` with the requested adapters; the config now served."""
    netns, request = in_loopback_netns(), {}
    try:
        request = json.loads(adapters_request_file().read_text())
        wanted = [AdapterSpec.model_validate(a).model_dump(mode="json") for a in request["adapters"]]
        changed = StackConfig.model_validate({**config.model_dump(mode="json"), "adapters": wanted})
    except (OSError, KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        request_id = request.get("id") if isinstance(request, dict) else None
        write_state(url, config, netns=netns, adapters_request=request_id, adapters_error=str(exc))
        console.print(f"[red]adapters request refused:[/] {exc}")
        return config
    names = ", ".join(changed.adapter_names) or "none"
    with console.status(f"serving adapters: {names}"):
        cluster.deploy(changed)
    write_state(url, changed, netns=netns, adapters_request=request.get("id"))
    console.print(f"adapters now: {names}")
    return changed


def request_adapters(state: dict, adapters: list[AdapterSpec], *, timeout_s: float) -> dict:
    """Ask the running stack to serve ``adapters``; its record once it has (or refused)."""
    request_id = uuid.uuid4().hex
    path = adapters_request_file()
    path.write_text(json.dumps({"id": request_id, "adapters": [a.model_dump(mode="json") for a in adapters]}))
    os.kill(state["pid"], ADAPTERS_SIGNAL)
    deadline = time.monotonic() + timeout_s
    with console.status("waiting for the stack to apply the change"):
        while time.monotonic() < deadline:
            now = read_state()
            if now.get("adapters_request") == request_id:
                if now.get("adapters_error"):
                    raise ServeoutError(f"the stack refused the change: {now['adapters_error']}")
                return now
            time.sleep(0.5)
    raise ServeoutError(f"the stack did not apply the change within {timeout_s:g} s (see serving up's output)")


def probe(state: dict, name: str) -> str:
    """``serving``, or why the stack does not serve adapter ``name`` (one token asked)."""
    response = httpx.post(f"{state['url']}/v1/chat/completions", headers=request_headers(state), timeout=120,
                          json={"model": name, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    if response.status_code == 200:
        return "serving"
    try:
        return f"refused: {response.json()['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"refused: HTTP {response.status_code}"


def cmd_list(_: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    table = Table(title=f"LoRA adapters of {state['model']} at {state['url']}")
    for column in ("name", "path", "rank", "state"):
        table.add_column(column, overflow="fold")
    for adapter in state["adapters"]:
        table.add_row(adapter["name"], adapter["path"], str(adapter.get("rank") or "-"), probe(state, adapter["name"]))
    Console().print(table)
    return 0


def cmd_add(args: argparse.Namespace, store: Callable[[], ModelStore]) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    if args.path is None:  # a recipe of the base model's spec, made at set-up
        models = store()
        added = models.adapters.spec(models.catalog.get(state["model"]), args.name)
    else:
        added = AdapterSpec(name=args.name, path=args.path, rank=args.rank, description=args.description)
    current = [AdapterSpec.model_validate(a) for a in state["adapters"]]
    if not current:
        console.print("LoRA was off: the engines restart with it on (once)")
    request_adapters(state, [*(a for a in current if a.name != added.name), added], timeout_s=args.timeout_s)
    verdict = probe(state, added.name)
    console.print(f"{added.name}: {verdict}")
    return 0 if verdict == "serving" else 1


def cmd_remove(args: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    current = [AdapterSpec.model_validate(a) for a in state["adapters"]]
    if args.name not in {a.name for a in current}:
        raise ServeoutError(f"{args.name!r} is not an adapter of the stack; it serves: "
                            f"{', '.join(a.name for a in current) or 'none'}")
    request_adapters(state, [a for a in current if a.name != args.name], timeout_s=args.timeout_s)
    console.print(f"{args.name}: removed (its requests in flight finish; new ones get a 404)")
    return 0


def add_adapters_command(sub: argparse._SubParsersAction, store: Callable[[], ModelStore]) -> None:
    """``serving adapters list | add | remove``."""
    adapters = sub.add_parser("adapters", help="the running stack's LoRA adapters (changed without a restart)")
    commands = adapters.add_subparsers(dest="adapters_command", required=True)
    commands.add_parser("list", help="each adapter and whether it serves").set_defaults(func=cmd_list)
    add = commands.add_parser("add", help="serve an adapter (a recipe of the model spec, or --path DIR)")
    add.add_argument("name", help="the model id requests will name")
    add.add_argument("--path", help="a PEFT LoRA folder (default: the spec's recipe NAME, made at set-up)")
    add.add_argument("--rank", type=int, help="its rank, checked against max_lora_rank before it loads")
    add.add_argument("--description", default="")
    add.set_defaults(func=lambda args: cmd_add(args, store))
    remove = commands.add_parser("remove", help="stop serving an adapter")
    remove.add_argument("name")
    remove.set_defaults(func=cmd_remove)
    for command in (add, remove):
        command.add_argument("--timeout-s", type=float, default=600, help="how long to wait for the change")

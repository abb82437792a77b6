"""Faults under load on the real stack: what clients see, per fault.

Deploys the default model on 2 engine replicas (the direct mode: HAProxy, two routers,
the engine replicas serving HTTP themselves; ``--gateway-mode separate``: gateway
replicas on the byte path between HAProxy and the engines), then for each fault, one
after the other:

1. waits for 2 ready replicas;
2. starts ``--whole`` non-streamed and ``--streams`` streamed chat requests at once
   (``--max-tokens`` tokens each, ``ignore_eos``);
3. once a stream has its first token, applies the fault to the replica serving it (or
   to a router), then sends one more whole request every 0.25 s for ``--after`` s;
4. waits for every request (one with no answer after ``--timeout`` s is *hung*), then
   for Serve to have 2 ready replicas again (the time to recover, from the fault).

Faults: ``engine-core`` (SIGKILL of the replica's vLLM EngineCore), ``replica``
(SIGKILL of the replica's process), ``hung-replica`` (SIGSTOP of the replica's
process: the loopback stand-in for a partitioned node; Serve's health check replaces
it, and HAProxy ends the requests it holds once it has sent nothing for ``--deadline``
+ 30 s), ``router`` (SIGKILL of one of the node's two routers), ``node`` (with ``--nodes
3``: SIGKILL of every process of the worker node that runs the replica, its raylet
included; after ``--after`` s the node is started again, as Kubernetes would replace
the pod, and recovery is the replica back on it; the time from the node's restart to
2 ready replicas is compared with a bare vLLM server's start on the same box, measured
after the stack is down), ``head`` (with ``--nodes 3``: SIGKILL of the head's GCS
server; the head's ``ray start`` then takes the whole head node down, its ingress and
Serve's controller with it, as a head pod's container exit does; the head is started
again at once from its GCS store, as Kubernetes restarts the pod; clients use a worker
node's ingress for this fault, as a load balancer in front of the nodes would, and
recovery is Serve's controller answering with the app running and the head's ingress
serving again). With ``--nodes N`` every fault runs on a cluster of N real Ray nodes
(:mod:`serving.cluster.nodes`): a head and worker nodes of one engine replica each;
clients use the head's ingress (but for the head fault).

Per fault it prints: requests sent, answered 200, 429, other 4xx, 5xx, hung; streams
completed, ended with an error event, cut (the connection closed before ``[DONE]``);
resumed (streams on the faulted replica that completed anyway: the gateway went on
with them on the other replica, :mod:`serving.gateway.resume`) and of those, how many
are the greedy answer exactly (the same request's answer taken before the faults:
no token lost or repeated); the time to recover. Figures are written to
``results/chaos.json``, never asserted. As root it re-runs itself in a loopback-only
network namespace.

    .venv/bin/python -m benchmarks.chaos [--faults engine-core,replica,hung-replica,router]
    .venv/bin/python -m benchmarks.chaos --nodes 3 --faults node
    .venv/bin/python -m benchmarks.chaos --gateway-mode separate --faults engine-core,replica
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.arguments import choice_list
from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.metrics import samples
from benchmarks.common.model import MODEL, stack_config
from benchmarks.common.references import bare_vllm_server
from benchmarks.common.servers import ServerStartError, free_port
from serving.cluster.ingress_env import hard_stop_after
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.cluster.nodes import SLOT_RESOURCE
from serving.engine.process_guard import descendants

REPO = Path(__file__).resolve().parents[1]
FAULTS = ("engine-core", "replica", "hung-replica", "router", "node", "head")
KILLS_THE_REPLICA = ("engine-core", "replica", "node")  # its streams end unless resumed
HUNG = 0  # the status of a request with no answer within --timeout
CUT = -1  # the status of a request whose connection closed without an answer
console = Console() if sys.stdout.isatty() else Console(width=160)
NODE_KEEPER = ThreadPoolExecutor(1, thread_name_prefix="node-keeper")
"""The thread that restarts the head: it lives as long as this process."""


@dataclass
class StreamEnd:
    status: int
    ended: str  # completed, error_event, cut, hung or refused
    replica: str = ""  # the engine replica that started it (x-serveout-replica)
    text: str = ""  # the answer's text as received


@dataclass
class FaultReport:
    fault: str
    sent: int = 0
    ok: int = 0
    refused: int = 0  # 429
    other_4xx: int = 0
    server_errors: int = 0  # 5xx
    hung: int = 0
    cut_whole: int = 0  # a whole request whose connection closed with no answer
    streams_completed: int = 0
    streams_error_event: int = 0
    streams_cut: int = 0
    streams_resumed: int = 0  # streams of the faulted replica that completed on the other
    streams_resumed_exact: int = 0  # of those, the greedy answer token for token
    streams_exact: int = 0  # every completed stream that is the greedy answer (the control)
    recover_s: float | None = None
    rejoin_s: float | None = None  # node fault: from the node's restart to 2 ready replicas
    head_back_s: float | None = None  # head fault: from the fault to the restarted head's GCS answering
    statuses: dict[str, int] = field(default_factory=dict)
    bodies: dict[str, str] = field(default_factory=dict)  # the first body seen of each status but 200

    def count(self, status: int, body: str = "") -> None:
        self.sent += 1
        if status != 200 and body:
            self.bodies.setdefault(str(status), body[:300])
        self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
        if status == 200:
            self.ok += 1
        elif status == 429:
            self.refused += 1
        elif 400 <= status < 500:
            self.other_4xx += 1
        elif status >= 500:
            self.server_errors += 1
        elif status == HUNG:
            self.hung += 1
        elif status == CUT:
            self.cut_whole += 1

    def count_stream(self, end: StreamEnd, *, killed: str | None, reference: str) -> None:
        """Tally one stream; ``killed``: the replica the fault took down (its streams that
        completed were resumed elsewhere); ``reference``: the greedy answer."""
        self.count(end.status)
        completed = end.ended == "completed"
        self.streams_completed += completed
        self.streams_error_event += end.ended == "error_event"
        self.streams_cut += end.ended == "cut"
        self.streams_exact += completed and end.text == reference
        if completed and killed is not None and end.replica == killed:
            self.streams_resumed += 1
            self.streams_resumed_exact += end.text == reference


def body(stream: bool, max_tokens: int) -> dict:
    data = {"model": MODEL, "messages": [{"role": "user", "content": "Count slowly to one hundred."}],
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    return data | ({"stream": True} if stream else {})


async def whole(client: httpx.AsyncClient, url: str, max_tokens: int, timeout_s: float) -> tuple[int, str]:
    """(HTTP status, the body's start: kept for statuses but 200)."""
    try:
        response = await asyncio.wait_for(client.post(f"{url}/v1/chat/completions", json=body(False, max_tokens)),
                                          timeout_s)
    except TimeoutError:
        return HUNG, ""
    except httpx.TransportError as exc:
        return CUT, repr(exc)
    return response.status_code, response.text[:300]


async def stream(client: httpx.AsyncClient, url: str, max_tokens: int, timeout_s: float,
                 first: asyncio.Future) -> StreamEnd:
    """How one stream ended, where it started, and what it received."""
    end = StreamEnd(200, "cut")

    async def read() -> StreamEnd:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body(True, max_tokens)) as response:
            if response.status_code != 200:
                return StreamEnd(response.status_code, "refused")
            end.replica = response.headers.get("x-serveout-replica", "")
            pieces: list[str] = []
            async for line in response.aiter_lines():
                if line == "data: [DONE]":
                    end.ended = "error_event" if end.ended == "error_event" else "completed"
                    break
                if line.startswith("data: ") and '"error"' in line[:20]:
                    end.ended = "error_event"
                elif line.startswith("data: "):
                    if not first.done():
                        first.set_result(end.replica)
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    pieces.append(choices[0].get("delta", {}).get("content") or "")
            end.text = "".join(pieces)
            return end
    try:
        return await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        return StreamEnd(HUNG, "hung", end.replica)
    except httpx.TransportError:
        return end


def ready_replicas(url: str) -> float:
    """Serve's count of ready engine replicas, as the gateway replicas report it (each
    reports the same count, labelled ``gateway_replica`` when there are several)."""
    counts: dict[str, float] = {}
    for labels, value in samples(url, "serveout_replicas").items():
        if ("state", "ready") in labels:
            gateway = dict(labels).get("gateway_replica", "")
            counts[gateway] = counts.get(gateway, 0.0) + value
    return max(counts.values(), default=0.0)


def wait_for(predicate, timeout_s: float, period_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except httpx.HTTPError:
            pass
        time.sleep(period_s)
    return False


def replica_pids(app: str, replicas: int = 2) -> dict[str, dict]:
    """``{replica id: {"replica": pid, "engine_core": [pids]}}`` of the ``replicas`` engine
    replicas, each with a live engine (control calls, routed to either replica)."""
    from ray import serve

    from serving.app_builder import ENGINE_DEPLOYMENT

    handle = serve.get_deployment_handle(ENGINE_DEPLOYMENT, app_name=app)
    found: dict[str, dict] = {}
    for _ in range(60):
        pids = handle.pids.remote().result(timeout_s=60)
        if not pids["engine_dead"] and pids["engine_core"]:
            found[pids["replica_id"]] = pids
        if len(found) == replicas:
            return found
        time.sleep(0.5)
    raise RuntimeError(f"not every replica answered with a live engine: {found}")


def router_pids(app: str) -> list[int]:
    """The processes of the app's routers: Ray titles them ``ray::ServeReplica:APP:router``
    (only this network namespace's: another stack on the box may run some too)."""
    ours, found = os.readlink("/proc/self/ns/net"), []
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if f"ServeReplica:{app}:router" in title and os.readlink(f"/proc/{pid}/ns/net") == ours:
                found.append(pid)
        except OSError:
            continue
    return found


def routers_on_every_node() -> bool:
    """Every node's HAProxy asks only routers on its own node (Serve writes those as
    127.0.0.1). Serve adds a node's routers to its HAProxy's pool some 25 s after they
    run; until then a worker node's ingress asks a router on another node."""
    import ray

    base = Path(os.environ.get("RAY_SERVE_HAPROXY_SERVER_STATE_BASE", "/tmp/haproxy-serve"))
    for node in ray.nodes():
        lua = base / node["NodeID"] / "ingress_request_router.lua"
        if node["Alive"] and (not lua.is_file() or set(re.findall(r'host = "([\d.]+)"', lua.read_text()))
                              != {"127.0.0.1"}):
            return False
    return True


def control_back(cluster: LocalCluster, app: str) -> bool:
    """Serve's controller answers and reports ``app`` running, and the head's ingress serves."""
    from ray import serve

    status = serve.status().applications.get(app)
    if status is None or status.status.value != "RUNNING":
        return False
    return httpx.get(f"{cluster.url}/v1/models", timeout=5).status_code == 200


def restart_head_when_down(cluster: LocalCluster, timeout_s: float) -> float:
    """Wait for the head's ``ray start`` to end (it stops the node when its GCS dies),
    start the head again and reconnect; the seconds this took. Run it on
    :data:`NODE_KEEPER`: a node started from a thread gets its parent-death signal when
    that thread ends."""
    started = time.monotonic()
    cluster.nodes.nodes[0].process.wait(timeout_s)
    cluster.restart_head()
    return time.monotonic() - started


def node_of(cluster: LocalCluster, pid: int):
    """The worker node whose processes include ``pid``."""
    for node in cluster.nodes.nodes if cluster.nodes else []:
        if not node.head and pid in descendants(node.process.pid):
            return node
    raise RuntimeError(f"pid {pid} runs on no worker node")


def fault_target(fault: str, replica: str, cluster: LocalCluster, app: str) -> tuple[list[int], signal.Signals]:
    """The processes ``fault`` hits, and the signal."""
    if fault == "head":
        return [cluster.nodes.gcs_pid()], signal.SIGKILL
    if fault == "router":
        routers = router_pids(app)
        if not routers:
            raise RuntimeError("no router process found")
        return routers[:1], signal.SIGKILL
    pids = replica_pids(app)[replica]
    if fault == "engine-core":
        return pids["engine_core"][:1], signal.SIGKILL
    if fault == "node":
        node = node_of(cluster, pids["replica"])
        return [node.process.pid, *descendants(node.process.pid)], signal.SIGKILL
    return [pids["replica"]], signal.SIGSTOP if fault == "hung-replica" else signal.SIGKILL


async def greedy_answer(url: str, max_tokens: int, timeout_s: float) -> str:
    """The answer every request of the benchmark should get (temperature 0), before any fault."""
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        response = await client.post(f"{url}/v1/chat/completions", json=body(False, max_tokens))
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"]


async def run_fault(cluster: LocalCluster, app: str, fault: str, args: argparse.Namespace,
                    reference: str) -> FaultReport:
    url = cluster.ingress_urls[1] if fault == "head" else cluster.url
    report = FaultReport(fault)
    routers = len(router_pids(app))
    first: asyncio.Future = asyncio.get_running_loop().create_future()
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(args.timeout), limits=limits) as client:
        tasks = [asyncio.create_task(whole(client, url, args.max_tokens, args.timeout)) for _ in range(args.whole)]
        streams = [asyncio.create_task(stream(client, url, args.max_tokens, args.timeout, first))
                   for _ in range(args.streams)]
        replica = await asyncio.wait_for(first, args.timeout)
        pids, signum = await asyncio.to_thread(fault_target, fault, replica, cluster, app)
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        faulted = time.monotonic()
        head = asyncio.get_running_loop().run_in_executor(
            NODE_KEEPER, restart_head_when_down, cluster, args.recovery_timeout) if fault == "head" else None
        console.print(f"{fault}: {signum.name} to {len(pids)} process(es), pid {pids[0]} first "
                      f"(serving replica {replica or '?'})")
        while time.monotonic() - faulted < args.after:
            tasks.append(asyncio.create_task(whole(client, url, args.max_tokens, args.timeout)))
            await asyncio.sleep(0.25)
        for status, text in await asyncio.gather(*tasks):
            report.count(status, text)
        for end in await asyncio.gather(*streams):
            report.count_stream(end, killed=replica if fault in KILLS_THE_REPLICA else None, reference=reference)
        if head is not None:
            report.head_back_s = round(await head, 1)
    rejoined = None
    if fault == "node":  # the node replaced (same address), then the replica back on it
        cluster.nodes.restart(node_of_pid_index(cluster, pids[0]))
        rejoined = time.monotonic()
    if fault == "head":  # the controller back on the new head, the app running, the head's ingress serving
        back = await asyncio.to_thread(wait_for, lambda: control_back(cluster, app), args.recovery_timeout)
    elif fault == "router":  # back: as many router processes as before, the killed one not among them
        back = await asyncio.to_thread(wait_for, lambda: len(set(router_pids(app)) - set(pids)) >= routers,
                                       args.recovery_timeout)
    else:  # Serve first counts the replica gone (if it did not already), then 2 ready again
        down = await asyncio.to_thread(wait_for, lambda: ready_replicas(url) < 2, 60)
        back = down and await asyncio.to_thread(wait_for, lambda: ready_replicas(url) >= 2, args.recovery_timeout)
    report.recover_s = round(time.monotonic() - faulted, 1) if back else None
    if rejoined is not None and back:
        report.rejoin_s = round(time.monotonic() - rejoined, 1)
    if fault == "hung-replica":  # Serve kills a replica that fails its health checks; if not, end it
        try:
            os.kill(pids[0], signal.SIGKILL)
        except ProcessLookupError:
            pass
    return report


def node_of_pid_index(cluster: LocalCluster, ray_start_pid: int) -> int:
    return next(node.index for node in cluster.nodes.nodes if node.process.pid == ray_start_pid)


def table(reports: list[FaultReport], nodes: int = 1, mode: str = "direct") -> Table:
    where = f", {nodes} Ray nodes" if nodes > 1 else ""
    out = Table(title=f"Faults under load (2 engine replicas{where}, {mode} mode)")
    for column in ("fault", "sent", "200", "429", "other 4xx", "5xx", "hung", "whole cut", "streams done",
                   "greedy answer", "error event", "streams cut", "resumed", "resumed exact", "recovered (s)"):
        out.add_column(column, justify="left" if column == "fault" else "right")
    for r in reports:
        out.add_row(r.fault, *(str(v) for v in (r.sent, r.ok, r.refused, r.other_4xx, r.server_errors, r.hung,
                                                 r.cut_whole, r.streams_completed, r.streams_exact,
                                                 r.streams_error_event, r.streams_cut, r.streams_resumed,
                                                 r.streams_resumed_exact)),
                    "not within the timeout" if r.recover_s is None else f"{r.recover_s:.1f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--whole", type=int, default=8)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--after", type=float, default=10.0, help="seconds of new requests after the fault")
    parser.add_argument("--timeout", type=float, default=120.0, help="a request unanswered after this is hung")
    parser.add_argument("--recovery-timeout", type=float, default=300.0)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--deadline", type=float, default=300.0,
                        help="the stack's request deadline (gateway.request_timeout_s); HAProxy ends a "
                        "request whose replica sent nothing for this + 30 s")
    parser.add_argument("--gateway-mode", choices=("direct", "separate"), default="direct",
                        help="separate: gateway replicas relay the tokens (and resume a stream whose replica died)")
    parser.add_argument("--nodes", type=int, default=1, help="Ray nodes: 1, or 3 (a head and two worker nodes)")
    parser.add_argument("--null-engine", action="store_true",
                        help="replicas of the null engine at 20 tokens/s (the faults of the control plane and "
                        "the byte path, without the real engine's start; the engine-core fault needs the real one)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "chaos.json")
    args = parser.parse_args()
    faults = choice_list(parser, "--faults", args.faults, FAULTS)
    if args.null_engine and "engine-core" in faults:
        parser.error("the engine-core fault needs the real engine")
    if {"node", "head"} & set(faults) and args.nodes < 3:
        parser.error("the node and head faults need --nodes 3 (a head, and a worker node per replica)")
    loopback_if_root("benchmarks.chaos")
    reports: list[FaultReport] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    config = stack_config({"replicas": {"num_replicas": 2, "cpus_per_rank": 1,
                                        "node_resource": SLOT_RESOURCE if args.nodes > 1 else None},
                           "gateway": {"port": args.port, "request_timeout_s": args.deadline,
                                       "mode": args.gateway_mode}}
                          | ({"engine_backend": {"kind": "null", "tokens_per_s": 20}} if args.null_engine else {}))
    with LocalCluster(ClusterOptions(http_port=args.port, nodes=args.nodes,
                                     hard_stop_after_s=hard_stop_after(config))) as cluster:
        with console.status("serveout starting") as status:
            cluster.deploy(config, on_progress=lambda s: status.update(f"serveout: {s}"))
        reference = asyncio.run(greedy_answer(cluster.url, args.max_tokens, args.timeout))
        for fault in faults:
            if not wait_for(lambda: ready_replicas(cluster.url) >= 2, args.recovery_timeout):
                console.print(f"[red]{fault}: the stack did not have 2 ready replicas; stopping")
                break
            if args.nodes > 1 and args.gateway_mode == "direct" and not wait_for(routers_on_every_node, 120):
                # After a head restart Serve may leave the new head without routers of its
                # own for minutes: its ingress then asks another node's (it still serves).
                console.print(f"{fault}: not every node's ingress has routers of its own after 120 s; going on")
            reports.append(asyncio.run(run_fault(cluster, config.app_name, fault, args, reference)))
            args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "args": vars(args) | {"out": str(
                args.out)}, "faults": [asdict(r) for r in reports]}, indent=2))
            console.print(table(reports, args.nodes, args.gateway_mode))
            if reports[-1].head_back_s is not None:
                console.print(f"head: its GCS answered again {reports[-1].head_back_s:.1f} s after the kill")
    if "node" in faults:  # what a replaced node's rejoin is compared with: one bare engine's start
        started, bare_s = time.monotonic(), None
        try:
            with bare_vllm_server(free_port(), args.out.with_suffix(".vllm.log"), timeout_s=args.recovery_timeout):
                bare_s = round(time.monotonic() - started, 1)
        except ServerStartError as exc:
            console.print(f"[red]the bare vLLM server did not start: {exc}")
        rejoin = next((r.rejoin_s for r in reports if r.fault == "node"), None)
        ratio = f"{rejoin / bare_s:.2f}x" if rejoin and bare_s else "n/a"
        console.print(f"node rejoin to 2 ready replicas: {rejoin} s; a bare vLLM server's start here: "
                      f"{bare_s} s ({ratio})")
        summary = json.loads(args.out.read_text())
        args.out.write_text(json.dumps(summary | {"bare_vllm_start_s": bare_s}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()

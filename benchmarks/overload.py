"""Overload on the real stack (issue 12): does the admission bound hold for every burst,
and do two API keys share it fairly at 3x overload?

1. **Bursts.** Deploys the default model on ``--replicas`` (2) engine replicas with the
   default gateway bound (``gateway.max_in_flight``, read from the config), then fires
   ``--bursts`` (3) bursts of ``--burst`` (400) concurrent non-streamed
   ``/v1/completions`` (``--max-tokens`` 64, ``ignore_eos``), one connection each, one
   burst after the other. Per burst: 200s, 429s (and how many carried Retry-After),
   other statuses, the peak in-flight count the gateway reported (``GET /status``,
   polled while the burst runs), and whether the bound held: at least ``burst - bound``
   refused and the peak never above the bound.
2. **Two keys at 3x overload.** Redeploys with a keys file of two keys, ``heavy`` and
   ``light`` (no per-key limits: only the bound and its fair share act) and a bound of
   ``--keys-max-in-flight`` (16). For ``--duration`` s (60), ``--heavy`` (42) and
   ``--light`` (6) closed-loop senders per key (3x the bound together; the light key
   starts 1 s earlier and stays under its fair share) send non-streamed completions,
   waiting Retry-After after a 429 as the OpenAI SDK does. Per key: requests, 200,
   429 (and the gateway's reasons), other, p50/p95 latency of 200s, peak in flight, and
   its share of admitted requests against the share its fair slots give it.

    .venv/bin/python -m benchmarks.overload [--phases burst,keys] [--bursts 3] [--duration 60]

Figures are printed and written to ``results/overload.json``, never asserted. As root
the script re-runs itself in a loopback-only network namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from benchmarks.common.arguments import choice_list
from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL
from benchmarks.common.saturating_clients import deploy, raise_open_files, refusals, retry_after_s
from loadtest.analysis.stats import percentile
from serving.errors import ServeoutError
from serving.admission.bound import AdmissionController
from serving.cluster.local import ClusterOptions, LocalCluster

REPO = Path(__file__).resolve().parents[1]
NO_RESPONSE = 0  # the status of a request that got no HTTP answer (timeout, reset)
KEYS = {"heavy": "sk-heavy-overload-0123456789abcdef", "light": "sk-light-overload-0123456789abcdef"}
console = Console() if sys.stdout.isatty() else Console(width=160)


# --- pure figures -----------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """One request as the client saw it."""

    status: int
    retry_after: str | None
    latency_s: float


@dataclass(frozen=True)
class Tally:
    sent: int
    ok: int
    refused: int  # 429
    refused_with_retry_after: int
    other: dict[int, int]  # status -> count (0: no HTTP answer)
    ok_p50_s: float | None
    ok_p95_s: float | None
    refused_p95_s: float | None  # how fast a refusal comes back


def tally(outcomes: list[Outcome]) -> Tally:
    ok = sorted(o.latency_s for o in outcomes if o.status == 200)
    refused = [o for o in outcomes if o.status == 429]
    other = Counter(o.status for o in outcomes if o.status not in (200, 429))
    pct = lambda values, q: percentile(values, q) if values else None
    return Tally(len(outcomes), len(ok), len(refused), sum(o.retry_after is not None for o in refused),
                 dict(sorted(other.items())), pct(ok, 50), pct(ok, 95),
                 pct(sorted(o.latency_s for o in refused), 95))


def burst_verdict(t: Tally, burst: int, bound: int, peak_in_flight: float | None) -> dict[str, bool | None]:
    """Did the bound hold for one burst of ``burst`` requests at once? (None: not known)"""
    return {
        "refused_at_least_excess": t.refused >= burst - bound,
        "peak_within_bound": None if peak_in_flight is None else peak_in_flight <= bound,
        "retry_after_on_every_429": t.refused_with_retry_after == t.refused,
        "only_200_and_429": not t.other,
    }


def fairness(concurrency: dict[str, int], tallies: dict[str, Tally], bound: int) -> dict[str, dict]:
    """Per key: the slots its fair share lets it use (``min(senders, share)``), the share
    of admitted requests those slots give it, the share it got, and, for a key within
    its share, whether it was never refused (the promise of fair sharing)."""
    share = AdmissionController(bound).fair_share(active=len(concurrency))
    slots = {key: min(n, share) for key, n in concurrency.items()}
    admitted = sum(t.ok for t in tallies.values())
    return {key: {"senders": n, "fair_share": share, "slots": slots[key],
                  "expected_share": slots[key] / sum(slots.values()),
                  "admitted_share": tallies[key].ok / admitted if admitted else 0.0,
                  "within_share": n <= share,
                  "never_refused": tallies[key].refused == 0 and not tallies[key].other}
            for key, n in concurrency.items()}


@dataclass
class Peaks:
    """The highest value seen of each polled figure, and how many polls failed."""

    values: dict[str, float] = field(default_factory=dict)
    polls: int = 0
    failed: int = 0

    def add(self, sample: dict[str, float]) -> None:
        self.polls += 1
        for name, value in sample.items():
            self.values[name] = max(value, self.values.get(name, value))


def samples(metrics_text: str, sample_name: str, *labels: str) -> dict[str, float]:
    """``{"label values joined by spaces": value}`` of every ``sample_name`` in Prometheus text."""
    return {" ".join(s.labels[label] for label in labels): s.value
            for family in text_string_to_metric_families(metrics_text)
            for s in family.samples if s.name == sample_name and all(label in s.labels for label in labels)}


# --- the stack and the client -----------------------------------------------------------

def completion_body(i: int, max_tokens: int) -> dict:
    return {"model": MODEL, "prompt": f"Request {i}: count from one upwards.", "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0}


async def post(client: httpx.AsyncClient, url: str, body: dict, headers: dict | None = None) -> Outcome:
    start = time.perf_counter()
    try:
        response = await client.post(f"{url}/v1/completions", json=body, headers=headers)
        status, retry_after = response.status_code, response.headers.get("retry-after")
    except httpx.HTTPError:
        status, retry_after = NO_RESPONSE, None
    return Outcome(status, retry_after, time.perf_counter() - start)


async def watch(url: str, path: str, read: Callable[[httpx.Response], dict[str, float]],
                stop: asyncio.Event, period_s: float) -> Peaks:
    """Poll ``GET path`` every ``period_s`` until ``stop``; the peaks of ``read``."""
    peaks = Peaks()
    async with httpx.AsyncClient(timeout=10) as client:
        while not stop.is_set():
            try:
                response = await client.get(f"{url}{path}")
                response.raise_for_status()
                peaks.add(read(response))
            except (httpx.HTTPError, ValueError, KeyError):
                peaks.failed += 1
            try:
                await asyncio.wait_for(stop.wait(), period_s)
            except TimeoutError:
                pass
    return peaks


def in_flight_of(response: httpx.Response) -> dict[str, float]:
    return {"in_flight": response.json()["in_flight"]}


async def wait_idle(url: str, timeout_s: float) -> None:
    """Until the gateway reports nothing in flight (bounded), so bursts do not overlap."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=10) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get(f"{url}/status")).json()["in_flight"] == 0:
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            await asyncio.sleep(0.5)
    console.print(f"[yellow]the gateway still had requests in flight after {timeout_s:.0f} s")


async def one_burst(url: str, burst: int, max_tokens: int, timeout_s: float) -> tuple[list[Outcome], Peaks, float]:
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(url, "/status", in_flight_of, stop, 0.1))
    await asyncio.sleep(0.3)  # the watcher's first poll, before the burst
    limits = httpx.Limits(max_connections=burst, max_keepalive_connections=burst)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        start = time.perf_counter()
        outcomes = await asyncio.gather(*(post(client, url, completion_body(i, max_tokens))
                                          for i in range(burst)))
        wall = time.perf_counter() - start
    stop.set()
    return list(outcomes), await watcher, wall


def run_bursts(cluster: LocalCluster, args: argparse.Namespace) -> dict:
    config = deploy(cluster, {"replicas": {"num_replicas": args.replicas}, "gateway": {"port": args.port}}, console)
    bound, timeout_s = config.gateway.max_in_flight, config.gateway.request_timeout_s + 30
    rows = []
    for n in range(1, args.bursts + 1):
        with console.status(f"burst {n} of {args.bursts}: {args.burst} requests at once (bound {bound})"):
            outcomes, peaks, wall = asyncio.run(asyncio.wait_for(
                one_burst(cluster.url, args.burst, args.max_tokens, timeout_s), timeout_s + 60))
            asyncio.run(wait_idle(cluster.url, 60))
        t = tally(outcomes)
        peak = peaks.values.get("in_flight")
        rows.append({"burst": n, "tally": asdict(t), "peak_in_flight": peak, "polls": peaks.polls,
                     "failed_polls": peaks.failed, "wall_s": wall,
                     "verdict": burst_verdict(t, args.burst, bound, peak)})
    console.print(burst_table(rows, args.burst, bound, args.replicas))
    return {"bound": bound, "burst": args.burst, "replicas": args.replicas,
            "max_tokens": args.max_tokens, "bursts": rows}


async def contest(url: str, senders: dict[str, int], args: argparse.Namespace, timeout_s: float):
    """Closed-loop senders per key for ``args.duration`` s (the light key starts first)."""
    loop = asyncio.get_running_loop()
    outcomes: dict[str, list[Outcome]] = {key: [] for key in senders}
    deadline = loop.time() + args.duration

    async def sender(key: str, client: httpx.AsyncClient, i: int) -> None:
        headers = {"Authorization": f"Bearer {KEYS[key]}"}
        while loop.time() < deadline:
            outcome = await post(client, url, completion_body(i, args.max_tokens), headers)
            outcomes[key].append(outcome)
            if outcome.status != 200:  # back off as the OpenAI SDK does; never spin
                await asyncio.sleep(retry_after_s(outcome.retry_after))

    stop = asyncio.Event()
    status = asyncio.create_task(watch(url, "/status", in_flight_of, stop, 0.25))
    per_key = asyncio.create_task(watch(
        url, "/metrics", lambda r: samples(r.text, "serveout_key_in_flight_requests", "key"), stop, 0.5))
    limits = httpx.Limits(max_connections=sum(senders.values()))
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        light = [asyncio.create_task(sender("light", client, i)) for i in range(senders["light"])]
        await asyncio.sleep(1.0)  # the light key is active before the heavy one fills the bound
        heavy = [asyncio.create_task(sender("heavy", client, i)) for i in range(senders["heavy"])]
        await asyncio.gather(*light, *heavy)
    stop.set()
    return outcomes, await status, await per_key


def run_keys(cluster: LocalCluster, args: argparse.Namespace, folder: Path) -> dict:
    keys_file = folder / "keys.txt"  # no per-key limits: only the bound and its fair share act
    keys_file.write_text("".join(f"{name}:{key}\n" for name, key in KEYS.items()))
    config = deploy(cluster, {"replicas": {"num_replicas": args.replicas}, "gateway": {
        "port": args.port, "max_in_flight": args.keys_max_in_flight, "api_keys_file": str(keys_file),
        "metrics_public": True}}, console)  # /status and /metrics polled without a key
    bound, timeout_s = config.gateway.max_in_flight, config.gateway.request_timeout_s + 30
    senders = {"heavy": args.heavy, "light": args.light}
    rejected = lambda: refusals(httpx.get(f"{cluster.url}/metrics", timeout=30).text)
    before = rejected()
    with console.status(f"two keys for {args.duration:.0f} s: heavy {args.heavy} senders, light "
                        f"{args.light}, bound {bound}"):
        outcomes, status, per_key = asyncio.run(asyncio.wait_for(
            contest(cluster.url, senders, args, timeout_s), args.duration + timeout_s + 60))
    after = rejected()
    reasons = {k: v - before.get(k, 0.0) for k, v in after.items() if v > before.get(k, 0.0)}
    tallies = {key: tally(outcomes[key]) for key in senders}
    fair = fairness(senders, tallies, bound)
    result = {"bound": bound, "duration_s": args.duration, "senders": senders,
              "tallies": {k: asdict(t) for k, t in tallies.items()}, "fairness": fair,
              "reasons_429": dict(sorted(reasons.items())),
              "peak_in_flight": status.values.get("in_flight"), "peak_in_flight_per_key": per_key.values,
              "failed_polls": status.failed + per_key.failed}
    console.print(keys_table(result, tallies))
    return result


# --- tables and main --------------------------------------------------------------------

def num(value: float | None, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.0f}"


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def yes_no(value: bool | None) -> str:
    return "-" if value is None else "[green]yes" if value else "[red]NO"


def burst_table(rows: list[dict], burst: int, bound: int, replicas: int) -> Table:
    t = Table(title=f"{burst} concurrent completions at once, {replicas} replicas, bound {bound} "
                    f"(expected: >= {burst - bound} refused, peak in flight <= {bound})")
    for col in ("burst", "200", "429 (with Retry-After)", "other", "peak in flight", ">= B - bound refused",
                "peak <= bound", "429 p95 ms", "200 p50 / p95 s", "wall s"):
        t.add_column(col)
    for row in rows:
        x, v = row["tally"], row["verdict"]
        t.add_row(str(row["burst"]), str(x["ok"]), f"{x['refused']} ({x['refused_with_retry_after']})",
                  str(x["other"] or 0), f"{num(row['peak_in_flight'])} ({row['polls']} polls)",
                  yes_no(v["refused_at_least_excess"]), yes_no(v["peak_within_bound"]),
                  num(x["refused_p95_s"], 1000), f"{secs(x['ok_p50_s'])} / {secs(x['ok_p95_s'])}",
                  f"{row['wall_s']:.1f}")
    return t


def keys_table(result: dict, tallies: dict[str, Tally]) -> Table:
    bound, fair = result["bound"], result["fairness"]
    t = Table(title=f"two keys at {sum(result['senders'].values()) / bound:.1f}x the bound of {bound} for "
                    f"{result['duration_s']:.0f} s (fair share {fair['light']['fair_share']} each)",
              caption=f"peak in flight (gateway): {num(result['peak_in_flight'])}")
    for col in ("key", "senders", "requests", "200", "429", "429 reasons", "other", "200 p50 / p95 s",
                "peak in flight", "share of admitted", "expected share", "never refused"):
        t.add_column(col)
    for key, x in tallies.items():
        f = fair[key]
        reasons = ", ".join(f"{name.split()[1]} {n:.0f}" for name, n in result["reasons_429"].items()
                            if name.split()[0] == key)
        t.add_row(key, str(f["senders"]), str(x.sent), str(x.ok), str(x.refused), reasons or "-",
                  str(x.other or 0), f"{secs(x.ok_p50_s)} / {secs(x.ok_p95_s)}",
                  num(result["peak_in_flight_per_key"].get(key)),
                  f"{f['admitted_share']:.0%}", f"{f['expected_share']:.0%} ({f['slots']} slots)",
                  yes_no(f["never_refused"]) if f["within_share"] else "- (over its share)")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="burst,keys", help="which parts to run: burst, keys or both")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--burst", type=int, default=400, help="requests fired at once per burst")
    parser.add_argument("--bursts", type=int, default=3, help="bursts in a row")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--keys-max-in-flight", type=int, default=16, help="the bound of the two-key part")
    parser.add_argument("--heavy", type=int, default=42, help="concurrent senders of the heavy key")
    parser.add_argument("--light", type=int, default=6, help="concurrent senders of the light key")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of the two-key part")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "overload.json")
    args = parser.parse_args()
    phases = choice_list(parser, "--phases", args.phases, ("burst", "keys"))
    numbers = ("replicas", "burst", "bursts", "max_tokens", "keys_max_in_flight", "heavy", "light")
    if min(getattr(args, n) for n in numbers) < 1 or args.duration <= 0:
        parser.error(f"--{', --'.join(n.replace('_', '-') for n in numbers)} must be >= 1 and "
                     "--duration > 0")
    loopback_if_root("benchmarks.overload")
    raise_open_files(2 * max(args.burst, args.heavy + args.light) + 1024)
    results: dict = {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="serveout-overload-") as folder, \
                LocalCluster(ClusterOptions(http_port=args.port)) as cluster:
            for phase in phases:  # figures saved after each part
                results[phase] = (run_bursts(cluster, args) if phase == "burst"
                                  else run_keys(cluster, args, Path(folder)))
                args.out.write_text(json.dumps(results, indent=2))
                console.print(f"figures written to {args.out}")
    except ServeoutError as exc:
        console.print(f"[red]error: {exc}")
        raise SystemExit(3) from None


if __name__ == "__main__":
    main()

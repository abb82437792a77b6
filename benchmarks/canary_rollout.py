"""Issue 36's canary goals on the real CPU engine: a good adapter canary promoted to
100% and a bad one rolled back by itself, each under light load, counting every request.

One engine replica of the default model serves the two adapters set-up trains
(``clinic``, ``pharmacy``). The rollouts run through the admin endpoint as
``serving rollout start`` calls it (``POST /v1/rollouts``), in turn:

1. **good**: ``clinic`` -> ``clinic-v2``, the same weights as ``clinic`` (a harmless
   change): expected promoted to 100%; the public name ``clinic`` then points at
   ``clinic-v2`` and ``clinic`` is unloaded;
2. **bad**: ``clinic`` (now ``clinic-v2``) -> ``clinic-v3``, the *pharmacy* adapter's
   weights (answers in another voice): expected rolled back.

The quality probe's set (``loadtest quality --items``) is the stable version's own
greedy answers to the clinic adapter's training questions, taken before the rollouts
(the answers users get today; a canary is graded on giving the same), 8 items.

All along, ``--workers`` closed-loop clients send chat requests for ``clinic`` with one
of ``--sessions`` session ids each (sticky); a request is *lost* when it does not end
in a 200 with an answer. Printed: per rollout, the outcome, the time from start to the
decision and to the end (retired version unloaded), requests sent and lost, requests
answered by the canary (its voice), and the recorded steps.

    .venv/bin/python -m benchmarks.canary_rollout [--workers 3] [--sessions 40] [--min-requests 8]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import catalog, stack_config
from serving.admin.adapter_control import AdapterControl, refusal
from serving.admin.endpoint import AdminApi, serve_admin_api
from serving.admin.quality_probe import probe_quality
from serving.admin.rollout_control import RolloutControl
from serving.admin.rollout_record import RolloutRecorder
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.model_store import ModelStore, default_home

REPO = Path(__file__).resolve().parents[1]
console = Console() if sys.stdout.isatty() else Console(width=180)
QUESTIONS = [json.loads(line)["user"] for line in (REPO / "models/adapters/clinic.jsonl").read_text().splitlines()
             if line.strip()]
PROBE_QUESTIONS = 8
"""Items of the probe set: the first clinic questions."""
OUTPUT_TOKENS = 24
ENDED = ("promoted", "rolled_back", "failed")


def reference_items(url: str, model: str, path: Path) -> None:
    """The probe's set: ``model``'s greedy answers to the clinic questions, as items."""
    lines = []
    for i, question in enumerate(QUESTIONS[:PROBE_QUESTIONS]):
        answer = ask(httpx.Client(timeout=300), url, model, question, None)[1]
        lines.append(json.dumps({"id": f"clinic-{i}", "category": "clinic-voice", "prompt": question,
                                 "source": f"{model}'s greedy answer before the rollout (benchmarks/canary_rollout.py)",
                                 "max_tokens": OUTPUT_TOKENS, "answers": [answer]}))
    path.write_text("\n".join(lines) + "\n")


def ask(client: httpx.Client, url: str, model: str, question: str, session: str | None) -> tuple[int, str]:
    headers = {"x-session-id": session} if session else {}
    response = client.post(f"{url}/v1/chat/completions", headers=headers, json={
        "model": model, "messages": [{"role": "user", "content": question}], "temperature": 0,
        "max_tokens": OUTPUT_TOKENS})
    if response.status_code != 200:
        return response.status_code, response.text[:200]
    return 200, response.json()["choices"][0]["message"]["content"] or ""


class Load:
    """Closed-loop clients asking ``clinic`` until stopped; every outcome counted."""

    def __init__(self, url: str, workers: int, sessions: int) -> None:
        self.url, self.sessions, self.stop = url, sessions, threading.Event()
        self.results: list[tuple[float, int, str]] = []
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(workers)]

    def _work(self, seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=600) as client:
            while not self.stop.is_set():
                try:
                    status, text = ask(client, self.url, "clinic", rng.choice(QUESTIONS),
                                       f"user-{rng.randrange(self.sessions)}")
                except httpx.HTTPError as exc:
                    status, text = 0, repr(exc)
                self.results.append((time.monotonic(), status, text))

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def rollout(admin: str, url: str, body: dict) -> dict:
    """Start one rollout and follow it to its end: its figures."""
    started = time.monotonic()
    answer = httpx.post(f"{admin}/v1/rollouts", json=body, timeout=600)
    if answer.status_code != 200:
        return {"outcome": f"refused: {answer.json()['error']['message']}", "history": []}
    while (status := httpx.get(f"{admin}/v1/rollouts", timeout=30).json())["phase"] not in ENDED:
        time.sleep(1.0)
    decided = next((e["at"] for e in status["history"] if e.get("phase") in ("promoting", "rolling_back")), None)
    first = status["history"][0]["at"]
    return {"outcome": status["phase"], "reason": status["reason"], "history": status["history"],
            "decision_s": decided - first if decided else None, "total_s": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3, help="closed-loop clients (default: %(default)s)")
    parser.add_argument("--sessions", type=int, default=40, help="session ids they use (default: %(default)s)")
    parser.add_argument("--min-requests", type=int, default=8, help="canary requests per step (default: %(default)s)")
    parser.add_argument("--step-timeout", type=float, default=60.0, help="seconds (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args()
    loopback_if_root("benchmarks.canary_rollout")
    config = stack_config({"adapters": ["clinic", "pharmacy"], "replicas": {"num_replicas": 1, "cpus_per_rank": 2}})
    clinic, pharmacy = (a.path for a in config.adapters)
    store = ModelStore(catalog())
    rows = []
    with LocalCluster(ClusterOptions(http_port=8000)) as cluster, tempfile.TemporaryDirectory() as tmp:
        with console.status("deploying one engine replica with clinic and pharmacy"):
            url = cluster.deploy(config)
        control = AdapterControl(cluster, config, probe=lambda name: refusal(url, {}, name),
                                 recipe=lambda base, name: store.adapters.spec(catalog().get(base), name))
        registry = CollectorRegistry()
        rollouts = RolloutControl(control, RolloutRecorder(registry, config.audit, default_home()), url=url,
                                  headers={}, probe=lambda plan, name: probe_quality(url, name, plan.quality))
        server = serve_admin_api(AdminApi(control, None, rollouts, registry), "127.0.0.1", 0)
        admin = f"http://127.0.0.1:{server.server_address[1]}"
        items = Path(tmp) / "clinic-voice.jsonl"
        reference_items(url, "clinic", items)
        judge = {"min_requests": args.min_requests, "step_timeout_s": args.step_timeout}
        quality = {"items": str(items), "limit": None, "concurrency": 2}
        for label, canary, path in (("good: same weights", "clinic-v2", clinic),
                                    ("bad: pharmacy weights", "clinic-v3", pharmacy)):
            with Load(url, args.workers, args.sessions) as load:
                time.sleep(5.0)
                t0 = time.monotonic()
                figures = rollout(admin, url, {"model": "clinic", "canary": canary, "path": str(path),
                                               "judge": judge, "quality": quality})
                t1 = time.monotonic()
                time.sleep(5.0)
            during = [r for r in load.results if t0 <= r[0] <= t1]
            lost = [r for r in load.results if r[1] != 200 or not r[2]]
            on_canary = sum(r[2].startswith("Pharmacist") for r in during) if "bad" in label else None
            rows.append({"scenario": label, **{k: v for k, v in figures.items()}, "sent": len(load.results),
                         "during": len(during), "lost": len(lost), "lost_examples": [r[1:] for r in lost[:3]],
                         "canary_answers": on_canary})
        server.shutdown()
    table = Table(title=f"Adapter canaries on 1 CPU engine replica (SmolLM2-135M), {args.workers} closed-loop "
                        f"clients, {args.sessions} sticky sessions, steps 5/25/50/100, {args.min_requests} canary "
                        "requests or the step timeout per step")
    for column in ("scenario", "outcome", "decision s", "end s", "requests (during rollout)", "lost",
                   "answered by the bad canary", "reason"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["scenario"], row["outcome"], _s(row.get("decision_s")), _s(row.get("total_s")),
                      f"{row['sent']} ({row['during']})", str(row["lost"]),
                      "-" if row["canary_answers"] is None else str(row["canary_answers"]), row.get("reason", ""))
    console.print(table)
    for row in rows:
        console.print(f"[bold]{row['scenario']}[/]")
        for entry in row["history"]:
            console.print(f"  +{entry['at'] - row['history'][0]['at']:6.1f}s {entry.get('outcome') or entry.get('phase')}: "
                          f"{entry['line']}", highlight=False, markup=False)
        for example in row["lost_examples"]:
            console.print(f"  lost: {example}", markup=False)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1, default=str))


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    main()

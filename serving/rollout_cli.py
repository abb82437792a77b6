"""``serving rollout start | status | promote | abort``: a weighted canary of an
adapter, judged at each step and rolled back by itself, through the admin endpoint of
the stack ``serving up`` runs (:mod:`serving.admin.rollout_control`; docs/rollout.md)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from serving.adapters_cli import call_admin
from serving.run_state import read_state, rerun_in_stack_netns

console = Console(stderr=True)
ENDED = {"promoted": 0, "rolled_back": 3, "failed": 1}
"""Exit codes of ``start --wait`` by how the rollout ended."""


def _steps(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"steps are comma-separated percentages, got {text!r}") from None


def plan_body(args: argparse.Namespace) -> dict:
    """The admin endpoint's ``POST /v1/rollouts`` body from ``start``'s options."""
    body: dict = {"model": args.model, "canary": args.canary, "auto_promote": not args.no_auto_promote,
                  "judge": {}, "quality": {"enabled": not args.no_quality}}
    if args.path:
        body["path"] = str(Path(args.path).resolve())  # serving up's working folder is not ours
    for name, value in (("rank", args.rank), ("steps", args.steps), ("drain_s", args.drain)):
        if value is not None:
            body[name] = value
    for name, value in (("min_requests", args.min_requests), ("step_timeout_s", args.step_timeout)):
        if value is not None:
            body["judge"][name] = value
    for name, value in (("items", args.quality_items and str(Path(args.quality_items).resolve())),
                        ("limit", args.quality_limit)):
        if value is not None:
            body["quality"][name] = value
    return body


def show(status: dict, since: float = 0.0) -> float:
    """Print the rollout's state and its lines after ``since``; the last line's time."""
    if status.get("phase") is None:
        console.print("no rollout has run on this stack")
        return since
    for entry in status["history"]:
        if entry["at"] > since:
            stamp = time.strftime("%H:%M:%S", time.localtime(entry["at"]))
            what = entry.get("outcome") or entry.get("phase")
            console.print(f"{stamp} {what}: {escape(entry['line'])}", highlight=False)
            since = entry["at"]
    console.print(f"[bold]{status['model']}[/]: {status['phase']}, canary {status['canary']} at "
                  f"{status['percent']:g}% (steps {', '.join(f'{s:g}' for s in status['steps'])}), "
                  f"stable {status['stable']}" + (f"; {escape(status['reason'])}" if status["reason"] else ""))
    return since


def cmd_start(args: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    with console.status(f"loading {args.canary} beside {args.model} on every replica"):
        status = call_admin(state, "POST", "/v1/rollouts", plan_body(args))
    since = show(status)
    while args.wait and status["phase"] not in ENDED:
        time.sleep(2.0)
        status = call_admin(state, "GET", "/v1/rollouts")
        since = show(status, since) if any(e["at"] > since for e in status["history"]) else since
    return ENDED.get(status["phase"], 0) if args.wait else 0


def cmd_status(_: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    show(call_admin(state, "GET", "/v1/rollouts"))
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    state = read_state()
    if (code := rerun_in_stack_netns(state)) is not None:
        return code
    show(call_admin(state, "POST", f"/v1/rollouts/{args.rollout_command}"), since=time.time())
    return 0


def add_rollout_command(sub: argparse._SubParsersAction) -> None:
    """``serving rollout start | status | promote | abort``."""
    rollout = sub.add_parser("rollout", help="a weighted adapter canary, judged per step, rolled back by itself")
    commands = rollout.add_subparsers(dest="rollout_command", required=True)
    start = commands.add_parser("start", help="load a new version beside a model name's adapter and step its share")
    start.add_argument("model", help="the public model name (an adapter's, or a promoted rollout's)")
    start.add_argument("--canary", required=True, help="the new version's adapter name")
    start.add_argument("--path", help="its PEFT LoRA folder (default: the base spec's recipe CANARY)")
    start.add_argument("--rank", type=int, help="its rank, checked against max_lora_rank before it loads")
    start.add_argument("--steps", type=_steps, help="canary percent per step (default: 5,25,50,100)")
    start.add_argument("--no-auto-promote", action="store_true", help="hold before 100%% for `rollout promote`")
    start.add_argument("--min-requests", type=int, help="canary requests judged per step (default: 20)")
    start.add_argument("--step-timeout", type=float, metavar="S", help="judge a step on what it has after S "
                       "seconds (default: 120)")
    start.add_argument("--drain", type=float, metavar="S", help="longest wait for the retired version's requests "
                       "in flight before it unloads (default: 30)")
    start.add_argument("--no-quality", action="store_true", help="skip the quality probe")
    start.add_argument("--quality-items", help="the probe's JSONL set (default: loadtest's bundled set)")
    start.add_argument("--quality-limit", type=int, help="items asked of each version (default: 40)")
    start.add_argument("--wait", action="store_true", help="follow the rollout to its end (exit 0 promoted, "
                       "3 rolled back, 1 failed)")
    start.set_defaults(func=cmd_start)
    commands.add_parser("status", help="the latest rollout and every step").set_defaults(func=cmd_status)
    commands.add_parser("promote", help="send the canary 100%% now and retire the stable version").set_defaults(
        func=cmd_decide)
    commands.add_parser("abort", help="roll back: the canary gets nothing, then unloads").set_defaults(
        func=cmd_decide)



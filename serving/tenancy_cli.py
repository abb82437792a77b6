"""``serving usage`` (requests, tokens and cost per tenant, from the usage store) and
``serving audit verify PATH`` (the audit trail's hash chain)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from serving.errors import ConfigError, ServeoutError
from serving.model_store import default_home
from serving.tenancy.audit_files import verify_path
from serving.tenancy.rollup import deployment_cost, parse_by, parse_since, report, total
from serving.tenancy.usage_store import UsageStore

DEFAULT_PRICES = Path(__file__).resolve().parents[1] / "sweeps" / "prices.yaml"
out = Console()
REPORT_WIDTH = 160
"""At least this wide (a pipe or a narrow terminal): a cell is never cut short."""


def read_prices(path: Path) -> tuple[dict[str, float], str]:
    """Price per accelerator-hour by kind, and the currency (the sweep's price table)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
        return ({kind: float(entry["per_hour"]) for kind, entry in data["per_accelerator_hour"].items()},
                str(data.get("currency", "USD")))
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"cannot read prices from {path}: {exc}") from None


def cmd_usage(args: argparse.Namespace) -> int:
    try:
        since_s, by = parse_since(args.since), parse_by(args.by)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    path = Path(args.store) if args.store else default_home() / "run" / "usage.sqlite"
    try:
        store = UsageStore(path, read_only=True)
    except FileNotFoundError as exc:
        raise ServeoutError(f"{exc} (the stack writes it once it has served a request; see usage.path)") from None
    since = time.time() - since_s
    try:
        rows, ran = store.rows(since), store.replica_time(since)
    finally:
        store.close()
    prices, currency = read_prices(Path(args.prices))
    cost = deployment_cost(ran, prices)
    lines = report(rows, by, cost)
    table = Table(title=f"usage over the last {args.since} ({path})",
                  caption=("cost: the replicas' running time x their accelerators x the price per "
                           f"accelerator-hour ({args.prices}), shared by engine time"
                           if cost is not None else "cost: unknown (no replica time recorded, or an unpriced "
                           "accelerator)"))
    for dim in by:
        table.add_column(dim, no_wrap=True)
    for col in ("requests", "errors", "prompt tokens", "cached", "output tokens", "engine s", "share",
                f"cost ({currency})"):
        table.add_column(col, justify="right", no_wrap=True)

    def cells(usage, share, line_cost):
        return [f"{usage.requests:,}", f"{usage.errors:,}", f"{usage.prompt_tokens:,}", f"{usage.cached_tokens:,}",
                f"{usage.output_tokens:,}", f"{usage.engine_s:,.1f}", f"{share:.1%}",
                "-" if line_cost is None else f"{line_cost:,.4f}"]

    for line in lines:
        table.add_row(*line.group, *cells(line.usage, line.share, line.cost))
    if lines:
        table.add_section()
        table.add_row("total", *[""] * (len(by) - 1), *cells(total(lines), 1.0 if lines else 0.0, cost))
    Console(width=max(out.width, REPORT_WIDTH)).print(table)
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    try:
        verdicts, broken = verify_path(Path(args.path))
    except FileNotFoundError as exc:
        raise ServeoutError(str(exc)) from None
    if not verdicts:
        raise ServeoutError(f"no audit files (audit-<writer>-<seq>.jsonl) in {args.path}")
    records = sum(v.records for v in verdicts)
    if broken is not None:
        kind = "cut short" if broken.truncated else "broken"
        out.print(f"[red]chain {kind}[/] at {broken} ({records} records before it verified)")
        return 1
    out.print(f"[green]ok[/]: {len(verdicts)} file(s), {records} records, chain intact "
              f"(last hash {verdicts[-1].last_hash})")
    return 0


def add_tenancy_commands(sub: argparse._SubParsersAction) -> None:
    """``serving usage`` and ``serving audit verify``."""
    usage = sub.add_parser("usage", help="requests, tokens and cost per API key and model (the usage store)")
    usage.add_argument("--since", default="24h", help="window: 90s, 15m, 24h, 7d (default 24h)")
    usage.add_argument("--by", default="key,model", help="group by key, model or both (default key,model)")
    usage.add_argument("--store", help="the SQLite file (default $SERVEOUT_HOME/run/usage.sqlite)")
    usage.add_argument("--prices", default=str(DEFAULT_PRICES), help="price table (default sweeps/prices.yaml)")
    usage.set_defaults(func=cmd_usage)
    audit = sub.add_parser("audit", help="the audit trail").add_subparsers(dest="audit_command", required=True)
    verify = audit.add_parser("verify", help="check a file's (or a folder's rotated sets') hash chain; "
                              "exit 1 at the first broken record")
    verify.add_argument("path")
    verify.set_defaults(func=cmd_audit_verify)

"""``loadtest quality``: ask a target the evaluation set, print the score and its
interval per category; exit 0 (it measures), or 1 under ``--min-score``."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from loadtest.config import DEFAULT_MODEL, DEFAULT_TARGET
from loadtest.errors import ConfigError, ExitCode, LoadTestError
from loadtest.quality.items import BUNDLED_ITEMS, load_items, select
from loadtest.quality.probe import DEFAULT_MAX_TOKENS, ask_items, check_target, probe_target
from loadtest.quality.results import score_results, score_table, wrong_answers


def add_parser(sub: argparse._SubParsersAction, duration: type) -> None:
    """Register ``quality`` among ``loadtest``'s commands (``duration`` parses ``--timeout``)."""
    quality = sub.add_parser("quality", help="score a target's answers on a fixed evaluation set (temperature 0)")
    quality.add_argument("--target", default=DEFAULT_TARGET, help="base URL (default: %(default)s)")
    quality.add_argument("--model", default=DEFAULT_MODEL, help="served model name (default: %(default)s)")
    quality.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"),
                         help="bearer token (default: $OPENAI_API_KEY)")
    quality.add_argument("--items", type=Path, default=None,
                         help=f"a JSONL evaluation set (default: the bundled {BUNDLED_ITEMS})")
    quality.add_argument("--categories", default=None, help="comma-separated categories to ask (default: all)")
    quality.add_argument("--limit", type=int, default=None,
                         help="ask at most this many items, taken in turn from each category")
    quality.add_argument("--concurrency", type=int, default=4, help="requests in flight (default: %(default)s)")
    quality.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                         help="output tokens per answer unless an item sets its own (default: %(default)s)")
    quality.add_argument("--timeout", type=duration, default=120.0, help="per-request timeout (default: 120s)")
    quality.add_argument("--min-score", type=float, default=None, metavar="FRACTION",
                         help=f"exit {int(ExitCode.SLO_MISSED)} when the score's 95%% lower bound is below this "
                              "(0..1, e.g. 0.9)")
    quality.add_argument("--json", type=Path, default=None, metavar="FILE",
                         help="write the scores and every item's reply to this file")
    quality.add_argument("--quiet", action="store_true", help="no progress line")


def cmd_quality(args: argparse.Namespace, console: Console) -> int:
    """Run the probe and print its table; the exit code is 1 only under a missed ``--min-score``."""
    if args.min_score is not None and not 0.0 <= args.min_score <= 1.0:
        raise ConfigError(f"--min-score must be a fraction within 0..1, got {args.min_score:g}")
    categories = None if args.categories is None else [c.strip() for c in args.categories.split(",") if c.strip()]
    items = select(load_items(args.items), limit=args.limit, categories=categories)
    target = probe_target(args.target, args.model, api_key=args.api_key, timeout_s=args.timeout)
    check_target(target)
    err = Console(stderr=True)
    err.print(f"[bold]loadtest quality[/]: {len(items)} items -> {target.url} ({target.model}), "
              f"temperature 0, {args.concurrency} in flight")
    done = [0]

    def progress(_result) -> None:
        done[0] += 1
        if not args.quiet and (done[0] % 25 == 0 or done[0] == len(items)):
            err.print(f"  {done[0]}/{len(items)} answered")

    results = ask_items(target, items, concurrency=args.concurrency, max_tokens=args.max_tokens, progress=progress)
    if all(r.error is not None for r in results):
        raise LoadTestError(f"every request failed; the first: {results[0].error}")
    report = score_results(results, target=target.url, model=target.model,
                           items_file=str(args.items) if args.items else BUNDLED_ITEMS,
                           max_tokens=args.max_tokens, min_score=args.min_score)
    console.print(score_table(report))
    console.print(f"score: {report.overall.describe()}")
    if report.errors:
        console.print(f"[red]{report.errors} request(s) failed (graded wrong)[/]")
    for line in wrong_answers(report):
        console.print(f"  wrong: {escape(line)}", highlight=False)
    if args.json is not None:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report.model_dump(mode="json"), ensure_ascii=False, indent=1) + "\n",
                                 encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--json: cannot write {args.json}: {exc.strerror}") from None
        console.print(f"results: {args.json}")
    if report.passed is False:
        console.print(f"[bold red]below --min-score {args.min_score:g}[/]: lower bound {report.overall.low:.1%}")
        return int(ExitCode.SLO_MISSED)
    return int(ExitCode.OK)

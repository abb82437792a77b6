"""The quality probe's score for the default model per dtype, on the bare vLLM CPU engine.

For each dtype, starts the bare vLLM server (the engine settings serveout gives its own
replicas, benchmarks.common.references), runs ``loadtest quality`` on the whole bundled
set against it, and prints the scores side by side with their 95% Wilson intervals, per
category, and the items whose answers changed from the first dtype's. On an Intel CPU
with AMX, bfloat16 changes the default model's greedy answers; float32 is the reference
the set was validated in (100% by construction).

    .venv/bin/python -m benchmarks.quality_by_dtype [--dtypes float32,bfloat16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL
from benchmarks.common.references import bare_vllm_server
from simulator.machine import cpu_model

REPO = Path(__file__).resolve().parents[1]
console = Console() if sys.stdout.isatty() else Console(width=160)


def probe(url: str, out: Path, concurrency: int) -> dict:
    """``loadtest quality`` against ``url`` as a child program; its JSON report."""
    done = subprocess.run([sys.executable, "-m", "loadtest", "quality", "--target", url, "--model", MODEL,
                           "--concurrency", str(concurrency), "--timeout", "600s", "--json", str(out), "--quiet"],
                          cwd=REPO, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"loadtest quality failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(out.read_text())


def table(reports: dict[str, dict]) -> Table:
    t = Table(title=f"quality probe, {MODEL}, bare vLLM CPU engine, by dtype, on {cpu_model()}")
    t.add_column("category")
    for dtype in reports:
        t.add_column(f"{dtype}: right", justify="right")
        t.add_column(f"{dtype}: score (95% CI)", justify="right")
    first = next(iter(reports.values()))
    for name in [*first["categories"], "all"]:
        cells = []
        for report in reports.values():
            s = report["overall"] if name == "all" else report["categories"][name]
            cells += [f"{s['correct']}/{s['items']}", f"{s['score']:.1%} [{s['low']:.1%}, {s['high']:.1%}]"]
        t.add_row(name, *cells, style="bold" if name == "all" else None)
    return t


def changed(reference: dict, other: dict) -> list[str]:
    """Items right in the reference and wrong in ``other``: id, reply."""
    before = {r["id"]: r for r in reference["results"]}
    return [f"{r['id']}: {before[r['id']]['reply'].strip()[:60]!r} -> {r['reply'].strip()[:60]!r}"
            for r in other["results"] if before[r["id"]]["correct"] and not r["correct"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="float32,bfloat16", help="the first is the reference")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "quality_by_dtype.json")
    args = parser.parse_args()
    loopback_if_root("benchmarks.quality_by_dtype")
    reports: dict[str, dict] = {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for dtype in args.dtypes.split(","):
        with console.status(f"bare vLLM server, {dtype}: starting, then the probe"):
            with bare_vllm_server(args.port, Path(f"/tmp/serveout-quality-{dtype}.log"), dtype=dtype) as url:
                reports[dtype] = probe(url, args.out.with_name(f"quality-{dtype}.json"), args.concurrency)
        console.print(f"[bold]{dtype}[/]: {reports[dtype]['overall']['correct']}/{reports[dtype]['overall']['items']}")
    console.print(table(reports))
    reference, *others = reports
    for dtype in others:
        lost = changed(reports[reference], reports[dtype])
        console.print(f"[bold]{dtype}[/]: {len(lost)} item(s) right in {reference} and wrong here")
        for line in lost[:15]:
            console.print(f"  {line}", highlight=False)
    args.out.write_text(json.dumps({"cpu": cpu_model(), "reports": reports}, indent=1, ensure_ascii=False))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()

"""What a benchmark of many closed-loop clients against serveout's admission bound needs:
enough open files for one connection per client, the wait a 429 asks for, the stack
deployed with a progress line, and the refusals per key the stack counted."""

from __future__ import annotations

import resource

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from benchmarks.common.model import stack_config
from serving.cluster.local import LocalCluster
from serving.config.stack import StackConfig


def raise_open_files(needed: int) -> None:
    """One connection per request: lift the soft open-files limit if it is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed if hard == resource.RLIM_INFINITY
                                                    else min(needed, hard), hard))


def retry_after_s(value: str | None, default: float = 1.0) -> float:
    """Seconds to wait from a Retry-After header (whole seconds), else ``default``."""
    return float(value) if value is not None and value.strip().isdigit() else default


def deploy(cluster: LocalCluster, data: dict, console: Console) -> StackConfig:
    """Deploy the default model with ``data`` (plain stack-config overrides) on ``cluster``."""
    config = stack_config(data)
    with console.status("serveout starting") as status:
        cluster.deploy(config, on_progress=lambda s: status.update(f"serveout: {s}"))
    return config


def refusals(metrics_text: str) -> dict[str, float]:
    """``{"key reason": 429s}`` from the stack's metrics, summed over the gateway replicas
    (in the direct mode every engine replica admits, each its own series)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "serveout_key_rejected_requests_total":
                name = f"{sample.labels['key']} {sample.labels['reason']}"
                out[name] = out.get(name, 0.0) + sample.value
    return out

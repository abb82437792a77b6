"""Where and how an engine replica runs: its placement group and its process
environment (pure; no Ray import, so the manifest renderer can use it cheaply)."""

from __future__ import annotations

import sys
from pathlib import Path

from serving.config.model_spec import AcceleratorKind
from serving.config.stack import NullBackend, StackConfig


def engine_runtime_env(config: StackConfig) -> dict:
    """Environment of engine replica processes (set before they start)."""
    # VLLM_CONFIGURE_LOGGING=0: vLLM's logging set-up (logging.config.dictConfig) closes
    # every handler of the process, Serve's replica log handler too; a Serve controller
    # that restarts (the head node restarted) then cannot recover the replica
    # (``is_allocated`` reads that handler's file) and fails the whole deployment.
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "VLLM_CONFIGURE_LOGGING": "0"}
    if config.model.accelerator is AcceleratorKind.CPU:
        iomp = Path(sys.prefix) / "lib" / "libiomp5.so"  # intel-openmp: ~1.5x batched throughput
        if iomp.is_file():
            env["LD_PRELOAD"] = str(iomp)
    return {"env_vars": env}


def placement_bundles(config: StackConfig) -> list[dict[str, float]]:
    """The replica's placement group: its tensor-parallel ranks' resources.

    CPU: one bundle of cores per rank (vLLM's ``mp`` executor runs the ranks as
    local processes of the replica). GPU: a CPU bundle for the replica actor, then
    one GPU bundle per rank, which vLLM's ``ray`` executor places its workers on.
    A rank's bundle also takes one ``replicas.node_resource``, if set (the placement
    group packs the bundles into one node).
    """
    slot = {config.replicas.node_resource: 1.0} if config.replicas.node_resource else {}
    if isinstance(config.engine_backend, NullBackend):
        return [{"CPU": 1.0, **slot}]  # no model: one core, whatever the spec's TP or accelerator
    tp = config.model.tensor_parallel_size
    cpus = float(config.replicas.cpus_per_rank or 1)
    if config.model.accelerator is AcceleratorKind.CPU:
        return [{"CPU": cpus, **slot} for _ in range(tp)]
    return [{"CPU": 1.0}] + [{"GPU": 1.0, **slot} for _ in range(tp)]

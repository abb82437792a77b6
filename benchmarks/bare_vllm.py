"""The bare vLLM OpenAI server, as the reference the benchmarks compare against.

Started with the engine settings serveout gives its own replicas (same model spec:
its dtype and KV cache size, eager, intel-openmp preload, OMP bound to both cores), so
a side-by-side figure measures the serving path, not a configuration difference.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from serving.config.loading import build_stack_config
from serving.config.model_spec import ModelCatalog, ModelSpec
from serving.engine.placement import engine_runtime_env
from serving.model_store import ModelStore

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"


def model_path() -> Path:
    """The default model's prepared weights folder (error if not prepared)."""
    return ModelStore(ModelCatalog(REPO / "models")).require(MODEL)


def _spec() -> ModelSpec:
    """The default model's spec: the settings serveout's replicas use."""
    return ModelCatalog(REPO / "models").get(MODEL)


def _engine_env() -> dict[str, str]:
    catalog = ModelCatalog(REPO / "models")
    config = build_stack_config({}, catalog=catalog, resolve_path=ModelStore(catalog).require)
    return engine_runtime_env(config)["env_vars"]


@contextmanager
def bare_vllm_server(
    port: int, log: Path, *, dtype: str | None = None, timeout_s: float = 300.0
) -> Iterator[str]:
    """Run ``vllm.entrypoints.openai.api_server`` until the block ends; yields its URL once
    healthy. ``dtype`` defaults to the model spec's."""
    spec = _spec()
    env = {**os.environ, **_engine_env(), "VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_HOST_IP": "127.0.0.1"}
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path()),
        "--served-model-name", MODEL, "--dtype", dtype or spec.dtype.value,
        "--max-model-len", str(spec.max_model_len), "--enforce-eager",
        "--max-num-seqs", str(spec.engine.max_num_seqs), "--enable-prefix-caching",
        "--kv-cache-memory-bytes", str(int(spec.engine.kv_cache_space_gib * (1 << 30))),
        "--host", "127.0.0.1", "--port", str(port),
        "--disable-uvicorn-access-log", "--disable-log-stats",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        server = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_healthy(server, url, timeout_s, log)
            yield url
        finally:
            _stop(server)


def _wait_healthy(server: subprocess.Popen, url: str, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"vLLM exited with code {server.returncode} before it was healthy; see {log}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"vLLM was not healthy after {timeout_s:.0f} s; see {log}")


def _stop(server: subprocess.Popen) -> None:
    """Stop the server we started: SIGTERM, then SIGKILL to its own process group."""
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)

"""The reference servers the benchmarks compare serveout with, started as child processes.

- the bare vLLM OpenAI server, with the engine settings serveout gives its own replicas
  (same model spec: its dtype and KV cache size, eager, intel-openmp preload, OMP bound
  to both cores), so a side-by-side figure measures the serving path, not a
  configuration difference;
- Ray Serve LLM (``python -m benchmarks.ray_serve_llm``, its own Ray cluster), whose
  extra imports :func:`ensure_ray_llm_installed` installs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common.model import MODEL, engine_env, model_path, model_spec
from benchmarks.common.servers import HOST, REPO, ServerStartError, running, stop

RAY_LLM_REQUIREMENTS = REPO / "requirements" / "bench-ray-llm.txt"


@contextmanager
def bare_vllm_server(
    port: int, log: Path, *, dtype: str | None = None, timeout_s: float = 300.0,
    extra_args: Sequence[str] = (),
) -> Iterator[str]:
    """Run ``vllm.entrypoints.openai.api_server`` until the block ends; yields its URL once
    healthy. ``dtype`` defaults to the model spec's; ``extra_args`` are added to its command."""
    spec = model_spec()
    env = {**os.environ, **engine_env(), "VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_HOST_IP": HOST}
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path()),
        "--served-model-name", MODEL, "--dtype", dtype or spec.dtype.value,
        "--max-model-len", str(spec.max_model_len), "--enforce-eager",
        "--max-num-seqs", str(spec.engine.max_num_seqs), "--enable-prefix-caching",
        "--kv-cache-memory-bytes", str(int(spec.engine.kv_cache_space_gib * (1 << 30))),
        "--host", HOST, "--port", str(port),
        "--disable-uvicorn-access-log", "--disable-log-stats", *extra_args,
    ]  # fmt: skip
    url = f"http://{HOST}:{port}"
    with running(command, url, name="vLLM", log=log, timeout_s=timeout_s, env=env, new_session=True,
                 interval_s=1.0):
        yield url


def ensure_ray_llm_installed() -> None:
    """Install Ray Serve LLM's extra imports (pinned, ``--no-deps``) into this venv if missing."""
    if all(importlib.util.find_spec(name) for name in ("pyarrow", "pandas")):
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-r", str(RAY_LLM_REQUIREMENTS)],
                   check=True)


@contextmanager
def ray_serve_llm_server(port: int, log: Path) -> Iterator[str]:
    """Run ``python -m benchmarks.ray_serve_llm`` in a child process; yields its URL once
    it answers (it prints ``ready <url>``)."""
    ensure_ray_llm_installed()
    with log.open("w") as out:
        child = subprocess.Popen([sys.executable, "-m", "benchmarks.ray_serve_llm", "--port", str(port)],
                                 stdout=subprocess.PIPE, stderr=out, stdin=subprocess.PIPE, text=True, cwd=REPO)
        try:
            line = child.stdout.readline()
            if not line.startswith("ready "):
                raise ServerStartError(f"Ray Serve LLM did not start (see {log})")
            yield line.split()[1]
        finally:
            stop(child, timeout_s=120)

"""Ray Serve LLM 2.60 serving the default model, as a side-by-side reference.

``build_openai_app`` with direct streaming on (``RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING=1``:
HAProxy in front of the LLMServer replica's own HTTP server, its LLMRouter asked once
per request), the same engine settings serveout's replicas use (dtype, KV cache, eager,
intel-openmp, the model's max length). Runs in its own process (its Ray cluster, its
environment set before Ray is imported); prints ``ready <url>`` when it answers, and
serves until it gets SIGTERM or its stdin closes.

Needs ``pyarrow`` and ``pandas`` (``ray.serve.llm`` imports them; not in serveout's
lock): ``requirements/bench-ray-llm.txt``, installed by
:func:`benchmarks.common.references.ensure_ray_llm_installed`; ``ray_serve_llm_server``
there starts this program as a child.

    python -m benchmarks.ray_serve_llm --port 8300
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import httpx

from benchmarks.common.model import MODEL, engine_env, model_path, model_spec

START_TIMEOUT_S = 600.0


def serve_forever(port: int) -> None:
    os.environ.update({"RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING": "1", "RAY_SERVE_ENABLE_HA_PROXY": "1",
                       "RAY_SERVE_INGRESS_REQUEST_ROUTER_FORWARD_BODY": "1", "RAY_USAGE_STATS_ENABLED": "0",
                       "RAY_SERVE_HAPROXY_NBTHREAD": "1", "HF_HUB_OFFLINE": "1"})
    import ray
    from ray import serve
    from ray.serve.llm import LLMConfig, build_openai_app

    spec = model_spec()
    engine = spec.engine
    ray.init(num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config={"enable_access_log": False})
    config = LLMConfig(
        model_loading_config={"model_id": MODEL, "model_source": str(model_path())},
        engine_kwargs={"dtype": spec.dtype.value, "max_model_len": spec.max_model_len,
                       "enforce_eager": engine.enforce_eager, "max_num_seqs": engine.max_num_seqs,
                       "kv_cache_memory_bytes": int(engine.kv_cache_space_gib * (1 << 30)),
                       "enable_prefix_caching": engine.enable_prefix_caching},
        placement_group_config={"bundles": [{"CPU": 1}]},
        runtime_env={"env_vars": engine_env()},
        deployment_config={"num_replicas": 1},
    )
    serve.run(build_openai_app({"llm_configs": [config]}), name="ray-llm", route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
            if httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(1)
    print(f"ready {url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    stop.wait()
    serve.shutdown()
    ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8300)
    serve_forever(parser.parse_args().port)


if __name__ == "__main__":
    main()

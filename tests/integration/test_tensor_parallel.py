"""Tensor parallelism for real on the CPU: one engine replica split over 2 ranks
through the real placement path (a placement group of one CPU bundle per rank, vLLM's
``mp`` executor), serving a TEST MODEL.

SmolLM2 has 9 attention heads, which vLLM refuses to split over 2 ranks, so the model
here is ``tiny-llama-tp2-test``: Llama architecture, 8 heads, seeded random weights,
built at test time by ``ModelStore.prepare`` from its spec (models/). Its text is
gibberish; the test checks the plumbing (placement, ranks, streaming, usage), not
quality.
"""

from __future__ import annotations

import re

import psutil
import pytest
import ray
import yaml
from ray import serve

from serving.app_builder import ENGINE_DEPLOYMENT
from sweep.measure.serveout import ServeoutMeasurer
from sweep.report.folder import ResultsFolder
from sweep.search.loop import run_sweep
from sweep.spec.files import load_price_table, load_sweep_spec
from tests.integration.settings import PORT, SWEEP_SPEC, replicas

pytestmark = pytest.mark.integration

TP_MODEL = "tiny-llama-tp2-test"
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def tp_stack(stack):
    stack.store.prepare(TP_MODEL)  # seeded random weights, built here (cached afterwards)
    config = stack.ensure({"model": TP_MODEL, "replicas": replicas(1), "gateway": {"port": PORT}})
    assert config.model.tensor_parallel_size == 2
    return stack


def test_the_replica_holds_one_cpu_bundle_per_rank(tp_stack):
    groups = [g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"]
    bundles = [list(g["bundles"].values()) for g in groups]
    assert [{"CPU": 1.0}, {"CPU": 1.0}] in bundles, bundles


def test_the_engine_runs_two_rank_processes(tp_stack):
    handle = serve.get_deployment_handle(ENGINE_DEPLOYMENT, app_name=tp_stack.config.app_name)
    pids = handle.pids.remote().result(timeout_s=60)
    assert len(pids["engine_core"]) == 1, pids
    tree = psutil.Process(pids["replica"]).children(recursive=True)
    titles = [" ".join(p.cmdline()).strip() or p.name() for p in tree]  # vLLM titles its ranks
    ranks = sorted(m.group() for t in titles if (m := re.search(r"Worker_TP\d+", t)))
    assert ranks == ["Worker_TP0", "Worker_TP1"], titles


def test_a_streamed_chat_completion_through_two_ranks(tp_stack):
    from openai import OpenAI

    client = OpenAI(base_url=f"{tp_stack.url}/v1", api_key="unused", timeout=120, max_retries=0)
    stream = client.chat.completions.create(
        model=TP_MODEL, messages=[{"role": "user", "content": "Count to ten."}], max_tokens=MAX_TOKENS,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert text and finish == ["length"]
    assert usage is not None and usage.completion_tokens == MAX_TOKENS and usage.prompt_tokens > 0


def test_the_sweeps_tp2_candidate_deploys_and_is_measured(tp_stack, tmp_path):
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump({
        **SWEEP_SPEC, "name": "it-tp2", "model": TP_MODEL,
        "space": {"tensor_parallel": [2], "replicas": {"min": 1, "max": 1}},
    }))
    spec = load_sweep_spec(spec_path)
    out = tmp_path / "results"
    tp_stack.config = None  # the sweep redeploys the app; later tests must redeploy theirs
    with ServeoutMeasurer(spec, tp_stack.cluster, catalog=tp_stack.catalog, artifacts=out / "loadtests") as measurer:
        report = run_sweep(spec, load_price_table(spec.prices), measurer, ResultsFolder(out))
    [run] = report.runs
    assert run.status.value == "ok", (run.candidate_id, run.status, run.reason)
    assert run.candidate.tp == 2 and run.accelerators == 2
    assert run.throughput_output_tokens_per_s > 0

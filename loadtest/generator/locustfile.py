"""Our OpenAI user for Locust's own command line and web UI (interactive exploration).

    locust -f loadtest/generator/locustfile.py --host http://127.0.0.1:8000 \\
        --lt-model smollm2-135m-instruct --lt-workload "prompts:sets=en-questions"

then open http://127.0.0.1:8089 and pick users and spawn rate. Locust's own charts show
E2E (as response time) and, as a separate ``TTFT`` row, time to first token; its
percentiles are bucketed approximations. For exact figures, SLOs and reports use
``loadtest run`` (or add ``--lt-records FILE`` here and read the raw records).
"""

from __future__ import annotations

from pathlib import Path

import locust  # noqa: F401  (gevent monkey-patching first)
from locust import events

from loadtest.config import DEFAULT_MODEL, Endpoint, TargetConfig
from loadtest.generator.context import RunContext
from loadtest.generator.stage import RecordWriter
from loadtest.generator.user import OpenAIUser
from loadtest.workloads import WorkloadContext, parse_workload
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer


class ChatUser(OpenAIUser):
    """A closed-loop user sending the ``--lt-workload`` sessions (configured at test start)."""

    abstract = False


@events.init_command_line_parser.add_listener
def _add_options(parser) -> None:
    group = parser  # (argument groups do not take include_in_web_ui)
    group.add_argument("--lt-model", default=DEFAULT_MODEL, include_in_web_ui=True, help="served model name")
    group.add_argument(
        "--lt-workload", default="prompts:sets=en-questions", include_in_web_ui=True, help="loadtest workload spec"
    )
    group.add_argument("--lt-endpoint", default="chat", choices=("chat", "completions"), include_in_web_ui=True)
    group.add_argument("--lt-stream", default="true", choices=("true", "false"), include_in_web_ui=True)
    group.add_argument("--lt-tokenizer", default="", help="local HF folder (synthetic workloads)")
    group.add_argument("--lt-seed", type=int, default=0, include_in_web_ui=True)
    group.add_argument("--lt-pool", type=int, default=2000, help="sessions prepared")
    group.add_argument("--lt-records", default="", help="append raw request records (JSONL) to this file")
    group.add_argument("--lt-timeout", type=float, default=300.0, help="per-request timeout (s)")


@events.test_start.add_listener
def _configure(environment, **_kwargs) -> None:
    options = environment.parsed_options
    target = TargetConfig(
        url=environment.host or "http://127.0.0.1:8000",
        model=options.lt_model,
        endpoint=Endpoint(options.lt_endpoint),
        stream=options.lt_stream == "true",
        request_timeout_s=options.lt_timeout,
    )
    tokenizer_path = Path(options.lt_tokenizer) if options.lt_tokenizer else default_tokenizer_path(target.model)
    ctx = WorkloadContext(
        seed=options.lt_seed,
        chat=target.endpoint is Endpoint.CHAT,
        tokenizer_loader=lambda: load_tokenizer(tokenizer_path),
    )
    plan = parse_workload(options.lt_workload).build(options.lt_pool, ctx)
    run = RunContext(plan=plan, arrivals=None, max_requests=None, load_duration_s=None)
    run.start()
    # Locust configures users through class attributes; this module is Locust's entry only.
    ChatUser.run_context = run
    ChatUser.target = target
    ChatUser.ui_metrics = True
    if options.lt_records and not getattr(environment, "loadtest_writer", None):
        writer = RecordWriter(Path(options.lt_records))
        environment.events.request.add_listener(writer.on_request)
        environment.loadtest_writer = writer

"""The reason shown when a deployment fails: the exception line of the replica's traceback."""

from __future__ import annotations

from serving.cluster.local import last_exception_line

SERVE_MESSAGE = """The deployment failed to start 3 times in a row. This may be due to a problem with its \
constructor or initial health check failing. See controller logs for details. Error:
ray::ServeReplica:serveout:engine.initialize_and_get_metadata() (pid=4242, ip=127.0.0.1)
  File "/venv/lib/python3.11/site-packages/vllm/config/parallel.py", line 310, in verify
    raise ValueError(
ValueError: Total number of attention heads (9) must be divisible by tensor parallel size (2).
"""


def test_picks_the_exception_line():
    assert last_exception_line(SERVE_MESSAGE) == (
        "ValueError: Total number of attention heads (9) must be divisible by tensor parallel size (2).")


def test_without_a_traceback_the_last_line_and_nothing_for_nothing():
    assert last_exception_line("replica died\nout of memory\n") == "out of memory"
    assert last_exception_line("") == ""


def test_pydantic_errors_keep_their_detail_line():
    message = ("Error:\n  File \"x.py\", line 1\n"
               "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
               "  Value error, Total number of attention heads (9) must be divisible by tensor parallel "
               "size (2). [type=value_error]\n"
               "    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n")
    reason = last_exception_line(message)
    assert reason.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig")
    assert reason.endswith("must be divisible by tensor parallel size (2).")

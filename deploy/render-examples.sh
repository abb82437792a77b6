#!/usr/bin/env bash
# Re-render the checked-in examples under deploy/examples/. A unit test renders the
# same commands and fails when the files differ (tests/unit/serving/manifests/test_examples.py),
# so run this after changing the renderer, a model spec, a stack or a target file.
# `python -m serving.manifests render` takes the same arguments as `serving render`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
rm -rf deploy/examples/llama-3.3-70b-instruct-h200-3x8 deploy/examples/smollm2-135m-instruct-cpu-local-kind
"$PY" -m serving.manifests render --model llama-3.3-70b-instruct --config deploy/stacks/llama-3.3-70b-instruct-h200-3x8.yaml --target deploy/targets/h200-3x8.yaml --out deploy/examples/llama-3.3-70b-instruct-h200-3x8
"$PY" -m serving.manifests render --model smollm2-135m-instruct --config deploy/stacks/smollm2-135m-instruct-cpu-local-kind.yaml --target deploy/targets/cpu-local-kind.yaml --out deploy/examples/smollm2-135m-instruct-cpu-local-kind

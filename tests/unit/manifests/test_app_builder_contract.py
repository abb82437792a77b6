"""What the manifests assume of the app builder (imports transformers: a few seconds)."""

from __future__ import annotations

import importlib

from manifest_helpers import CATALOG, cluster_config

from serving.manifests.naming import ENGINE_DEPLOYMENT, engine_deployment_label
from serving.manifests.serve_config import IMPORT_PATH


def test_import_path_is_the_declarative_entry_point():
    module, attr = IMPORT_PATH.split(":")
    app_builder = importlib.import_module(module)
    assert getattr(app_builder, attr) is app_builder.app_from_args
    assert ENGINE_DEPLOYMENT == app_builder.ENGINE_DEPLOYMENT


def test_deployment_label_is_the_one_the_router_gets(kind):
    from serving.app_builder import engine_deployment_options

    config = cluster_config(CATALOG.get("smollm2-135m-instruct"), kind)
    router = engine_deployment_options(config)["request_router_config"]
    assert router.request_router_kwargs["deployment_label"] == engine_deployment_label(config)

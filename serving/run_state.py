"""What a running ``serving up`` records for the other ``serving`` commands
(``status``, ``down``, ``exec``, ``adapters``): its PID, URL, network namespace, key
file, admin endpoint and the adapters it serves, in ``$SERVEOUT_HOME/run/serving.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from serving.cluster.netns import in_loopback_netns, nsenter_prefix, python_argv
from serving.config.stack import StackConfig
from serving.errors import ServeoutError
from serving.model_store import default_home


def state_file() -> Path:
    return default_home() / "run" / "serving.json"


def write_state(url: str, config: StackConfig, *, netns: bool, admin_url: str | None = None,
                nodes: list[dict] | None = None) -> None:
    """Record the stack (``admin_url``: its admin endpoint; ``nodes``: its Ray nodes when
    it runs several, :meth:`serving.cluster.local.LocalCluster.node_records`)."""
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    keys_file = config.gateway.api_keys_file
    path.write_text(json.dumps({
        "pid": os.getpid(), "url": url, "app": config.app_name, "netns": netns, "model": config.model.name,
        "api_keys_file": str(keys_file) if keys_file else None, "metrics_public": config.gateway.metrics_public,
        "adapters": [a.model_dump(mode="json") for a in config.adapters], "admin_url": admin_url,
        "nodes": nodes or [],
    }))


def update_nodes(nodes: list[dict]) -> None:
    """Record the stack's nodes again (a node was replaced: new PIDs)."""
    path = state_file()
    path.write_text(json.dumps(json.loads(path.read_text()) | {"nodes": nodes}))


def read_state() -> dict:
    """The running stack's record; :class:`ServeoutError` when none runs."""
    path = state_file()
    if not path.is_file():
        raise ServeoutError("no running stack found (start one with `serving up`)")
    state = json.loads(path.read_text())
    try:
        os.kill(state["pid"], 0)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
        raise ServeoutError("the recorded stack is no longer running") from None
    return state


def request_headers(state: dict, *, status: bool = False, admin: bool = False) -> dict[str, str]:
    """What a ``serving`` command sends to the running stack: its first API key, if any
    (``status``: none for ``/status`` when the stack serves it without a key; ``admin``:
    the first admin key, and an error if keys are on and none is)."""
    from serving.admission.api_keys import read_keys_file
    from serving.config.gateway import KeyLimits

    keys_file = None if status and state.get("metrics_public") else state.get("api_keys_file")
    keys = read_keys_file(Path(keys_file), defaults=KeyLimits(), priority=None) if keys_file else []
    if admin and keys:
        keys = [k for k in keys if k.admin]
        if not keys:
            raise ServeoutError(f"no admin key in {keys_file}: add `admin` to a key's line (then restart the stack)")
    return {"Authorization": f"Bearer {keys[0].key}"} if keys else {}


def rerun_in_stack_netns(state: dict) -> int | None:
    """Run this ``serving`` command again inside the stack's network namespace (its exit
    code), when the stack has one and this process is outside it; else None."""
    if not state["netns"] or in_loopback_netns():
        return None
    os.environ["SERVEOUT_IN_LOOPBACK_NETNS"] = "1"
    argv = nsenter_prefix(state["pid"]) + python_argv("serving.cli", sys.argv[1:])
    return subprocess.run(argv, env=os.environ).returncode

"""Loopback-only network namespaces for machines where Ray must not listen outside.

Ray listens on every interface and each Serve replica opens a gRPC port on all
interfaces; on a shared box, run the stack in a fresh network namespace that only
has loopback (needs root and util-linux's ``unshare``).
"""

from __future__ import annotations

import os
import shutil
import sys

from serving.errors import ClusterError

IN_NETNS_ENV = "SERVEOUT_IN_LOOPBACK_NETNS"


def in_loopback_netns() -> bool:
    """This process runs in a network namespace whose only interface is loopback (one
    ``serving`` made, or any other, e.g. ``unshare -n``)."""
    return os.environ.get(IN_NETNS_ENV) == "1" or interfaces() == ["lo"]


def interfaces() -> list[str]:
    """The network interfaces of this process's namespace (``/proc/net/dev``)."""
    try:
        lines = open("/proc/net/dev").read().splitlines()[2:]
    except OSError:
        return []
    return sorted(line.split(":", 1)[0].strip() for line in lines if ":" in line)


def reexec_in_loopback_netns(argv: list[str]) -> None:
    """Replace this process with ``argv`` run inside a new loopback-only namespace."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        raise ClusterError("--isolate-network needs `unshare` (util-linux) and `ip` (iproute2)")
    os.environ[IN_NETNS_ENV] = "1"
    script = 'ip link set lo up && exec "$@"'
    os.execvp("unshare", ["unshare", "-n", "sh", "-c", script, "sh", *argv])


def nsenter_prefix(pid: int) -> list[str]:
    """Command prefix that runs a command in the network namespace of ``pid``."""
    return ["nsenter", "-t", str(pid), "-n"]


def python_argv(module: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", module, *args]

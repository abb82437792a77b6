"""When a benchmark re-runs itself in a loopback-only network namespace (the mechanism
is :mod:`serving.cluster.netns`): Ray must not listen outside on a shared box."""

from __future__ import annotations

import os
import sys

from serving.cluster.netns import in_loopback_netns, python_argv, reexec_in_loopback_netns


def loopback_if_root(module: str) -> None:
    """As root, replace this process with ``python -m module`` (same arguments) inside a
    new loopback-only namespace; otherwise, or once inside, return."""
    if os.geteuid() == 0 and not in_loopback_netns():
        reexec_in_loopback_netns(python_argv(module, sys.argv[1:]))


def loopback_holding_lock(lock: str) -> None:
    """Replace this process with itself (same command line) inside a new loopback-only
    namespace, holding ``flock lock`` for its whole run; once inside, return."""
    if not in_loopback_netns():
        argv = ["flock", lock, sys.executable, *sys.argv]
        print("isolating: unshare -n ...", " ".join(argv[:2]), "...", flush=True)
        reexec_in_loopback_netns(argv)

"""Which share of a node's cores an engine replica binds to: the lowest slot that no
live replica on the node holds.

Serve's local rank cannot say. Serve keeps ranks contiguous: when a replica stops, a
survivor is renumbered (Ray 2.60 ``deployment_state.py``,
``check_rank_consistency_and_reassign_minimally``), but its engine stays bound to the
cores of its first rank, so a replica added later with the freed number would share
the survivor's cores (seen here: a scale-down 2 -> 1, then autoscaling 1 -> 2, put both
engines on core 1 and left core 0 idle).

A slot is an exclusive ``flock`` on ``<directory>/slot-N.lock``, held by the replica's
process for its life: the kernel drops it when the process ends, however it ends, so
a killed replica's cores are free for its replacement at once.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

SLOTS_DIR = Path(tempfile.gettempdir()) / "serveout-core-slots"
"""Where a node's engine replicas claim their slots (one directory per machine)."""


@dataclass
class CoreSlot:
    """A claimed slot: ``index`` stays this process's until :meth:`release` or its exit."""

    index: int
    _fd: int

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the file drops the lock
            self._fd = -1


def claim_core_slot(directory: Path = SLOTS_DIR) -> CoreSlot:
    """Claim the lowest free slot (``0`` for the first replica on a node). Always
    succeeds: there are only as many slots taken as live replicas on the node."""
    directory.mkdir(parents=True, exist_ok=True)
    index = 0
    while True:
        fd = os.open(directory / f"slot-{index}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            index += 1
            continue
        return CoreSlot(index, fd)

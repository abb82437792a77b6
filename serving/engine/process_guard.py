"""Child processes that die with their owner, however the owner dies.

vLLM runs its engine core (and, with tensor parallelism, its workers) in child
processes of the engine replica. When the replica's process is killed outright
(SIGKILL, the OOM killer, its Ray node stopped by a signal), even while its engine is
still starting, nothing tells them: they keep running, orphaned, with their gigabytes
of memory and their ports. A :class:`ProcessGuard` is a tiny separate process in its
own session that holds the read end of a pipe from its owner. Until the owner says
it is ready, the guard notes the owner's descendants twice a second; the owner then
writes the processes it wants gone with it. When the pipe closes (the owner closed it,
exited or was killed: the kernel closes its descriptors either way), the guard kills
every process it noted that still runs, and exits. A process is named by its PID and
its start time, so a PID the system has since given to another process is never hit.

:func:`die_with_parent` is the same promise one level up: a Ray worker whose raylet is
killed would otherwise linger, tearing down a gigabyte of objects for minutes.

This file is also the guard's program (``python -I process_guard.py``): standard
library only, so the guard starts in a few tens of milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterable

POLL_S = 0.5
"""How often the guard notes its owner's descendants until the owner is ready."""

READY = b"ready"
PR_SET_PDEATHSIG = 1


def _stat(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (``[0]`` is the state,
    field 3 of the file), or ``None`` when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field
    22), or ``None`` when no such process runs (a zombie has ended: ``None`` too)."""
    fields = _stat(pid)
    return None if fields is None or fields[0] in (b"Z", b"X") else int(fields[19])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), read from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(entry)) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))  # fields[1]: the parent
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


class ProcessGuard:
    """Kills the processes it is told of when this process ends, even by SIGKILL.

    >>> guard = ProcessGuard()                  # before starting the engine
    >>> guard.ready(descendants(os.getpid()))   # once the engine started its processes
    >>> guard.close()                           # at shutdown: kills what is left
    """

    def __init__(self) -> None:
        owner = os.getpid()
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, str(owner)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True)

    @property
    def pid(self) -> int:
        return self._process.pid

    def ready(self, pids: Iterable[int]) -> None:
        """Add ``pids`` (this guard's own PID is skipped) to what dies with this process,
        and stop noting this process's descendants."""
        lines = [f"{pid} {started}\n" for pid in pids
                 if pid != self.pid and (started := start_time(pid)) is not None]
        assert self._process.stdin is not None
        self._process.stdin.write("".join(lines).encode() + READY + b"\n")
        self._process.stdin.flush()

    def close(self, timeout_s: float = 5.0) -> None:
        """Kill what is still running of the watched processes now, and end the guard."""
        if self._process.stdin is not None and not self._process.stdin.closed:
            self._process.stdin.close()
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Have the kernel send this process ``signum`` when its parent dies (Linux; elsewhere
    a no-op). For a process whose parent is a long-lived daemon (a Ray worker under its
    raylet), or, as a ``preexec_fn``, for a child that must not outlive its starter. The
    kernel keeps the setting per thread: call it from a thread that lives as long as the
    process (calling it from several is harmless)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)


def _guard_main(owner: int) -> None:
    """Note the owner's descendants until it is ready (and the ``PID START`` lines it
    sends), until its pipe closes; then kill every noted process still running."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # only the pipe's end stops the guard
    noted: set[tuple[int, int]] = set()
    ready = False
    pipe = sys.stdin.buffer
    while True:
        if not ready:
            noted.update((pid, started) for pid in descendants(owner)
                         if pid != os.getpid() and (started := start_time(pid)) is not None)
            if not select.select([pipe], [], [], POLL_S)[0]:
                continue
        line = pipe.readline()
        if not line:
            break
        if line.strip() == READY:
            ready = True
        else:
            pid, started = (int(field) for field in line.split())
            noted.add((pid, started))
    kill_noted(noted)


def kill_noted(noted: Iterable[tuple[int, int | None]]) -> None:
    """SIGKILL each ``(pid, start time)`` still running as that same process (a PID the
    system has since given to another process is left alone)."""
    for pid, started in noted:
        if started is not None and start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    _guard_main(int(sys.argv[1]))

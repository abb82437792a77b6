"""Servers the benchmarks start as child processes: start one, wait until it answers,
stop it by its own PID (never by name: other jobs on a shared box run the same programs)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


class ServerStartError(RuntimeError):
    """A child server exited, or did not answer, before it was healthy."""


def free_port(host: str = HOST) -> int:
    """A TCP port free on ``host`` now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start(command: Sequence[str], *, log: Path | None, env: Mapping[str, str] | None = None,
          cwd: Path = REPO, new_session: bool = False) -> subprocess.Popen:
    """Start ``command`` (its output in ``log``, or inherited when ``None``); with
    ``new_session`` in its own process group, so that :func:`stop` can kill its children."""
    if log is None:
        return subprocess.Popen(command, cwd=cwd, env=env, start_new_session=new_session)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:  # the child holds its own copy of the descriptor
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                start_new_session=new_session)


def wait_healthy(process: subprocess.Popen, url: str, *, name: str, timeout_s: float, log: Path | None = None,
                 path: str = "/health", interval_s: float = 0.2) -> None:
    """Poll ``GET url+path`` until it answers 200; :class:`ServerStartError` if the
    process exits first or ``timeout_s`` passes."""
    see = f"; see {log}" if log else ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"{name} exited with code {process.returncode} before it was healthy{see}")
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(interval_s)
    raise ServerStartError(f"{name} was not healthy after {timeout_s:g} s{see}")


def stop(process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM to the process we started; after ``timeout_s``, SIGKILL (to its whole
    process group when it leads one)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            if os.getpgid(process.pid) == process.pid:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


@contextmanager
def running(command: Sequence[str], url: str, *, name: str, log: Path | None, timeout_s: float,
            env: Mapping[str, str] | None = None, new_session: bool = False, interval_s: float = 0.2,
            stop_timeout_s: float = 30.0) -> Iterator[subprocess.Popen]:
    """Start ``command``, wait until ``url`` is healthy, yield the process; stop it when
    the block ends (also when it never became healthy)."""
    process = start(command, log=log, env=env, new_session=new_session)
    try:
        wait_healthy(process, url, name=name, timeout_s=timeout_s, log=log, interval_s=interval_s)
        yield process
    finally:
        stop(process, stop_timeout_s)

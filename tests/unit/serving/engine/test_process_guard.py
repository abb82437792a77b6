"""The process guard with real processes: what an owner started dies with it, even when
the owner is SIGKILLed, and a clean close leaves the owner alone."""

import os
import signal
import subprocess
import sys
import time

from serving.engine.process_guard import descendants, start_time
from tests.paths import REPO

OWNER = """
import os, subprocess, sys, time
from serving.engine.process_guard import POLL_S, ProcessGuard
guard = ProcessGuard()
noted = subprocess.Popen(["sleep", "120"])  # never told of: the guard notes it while starting
time.sleep(3 * POLL_S)
told = subprocess.Popen(["sleep", "121"])   # started just before ready, told of
guard.ready([told.pid])
if sys.argv[1] == "close":
    guard.close()
print(noted.pid, told.pid, guard.pid, flush=True)
time.sleep(120)
"""


def _owner(mode: str) -> tuple[subprocess.Popen, list[int]]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, mode], stdout=subprocess.PIPE, text=True, cwd=REPO)
    pids = [int(pid) for pid in owner.stdout.readline().split()]
    return owner, pids


def _ended(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if start_time(pid) is None:
            return True
        time.sleep(0.05)
    return False


def test_what_the_owner_started_dies_when_the_owner_is_sigkilled():
    owner, (noted, told, guard) = _owner("die")
    try:
        assert start_time(noted) is not None and start_time(told) is not None
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert _ended(noted), "a process the owner started while starting outlived it"
        assert _ended(told), "a process the guard was told of outlived the owner"
        assert _ended(guard), "the guard did not end"
    finally:
        for pid in (noted, told, owner.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_clean_close_kills_what_was_watched_and_leaves_the_owner_running():
    owner, (noted, told, guard) = _owner("close")
    try:
        assert _ended(told) and _ended(noted) and _ended(guard)
        assert owner.poll() is None, "the guard's close killed its owner"
    finally:
        owner.kill()
        owner.wait()


def test_descendants_finds_children_and_their_children():
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, time; "
                              "subprocess.Popen(['sleep', '30']); time.sleep(30)"])
    try:
        deadline = time.monotonic() + 5
        while len(found := descendants(os.getpid())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in found and len(found) >= 2
    finally:
        for pid in descendants(child.pid):
            os.kill(pid, signal.SIGKILL)
        child.kill()
        child.wait()


def test_a_zombie_has_no_start_time():
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while start_time(child.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # exited but not yet reaped: a zombie
    assert start_time(child.pid) is None
    child.wait()

"""Open a page in a real headless Chromium (Debian's ``chromium``) over the DevTools
protocol: every script error, console error and network request it makes is recorded.

``scripts/setup-test-tools`` installs Chromium; without it the tests using this fail
(never skip) and say so.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import websockets

CHROMIUM = "chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--metrics-recording-only", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0")  # fmt: skip


@dataclass
class PageRun:
    """What a page did while it loaded and then ran ``script``."""

    value: object = None
    exceptions: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def chromium() -> str:
    path = shutil.which(CHROMIUM)
    if path is None:
        raise AssertionError("Debian's chromium is not installed: run scripts/setup-test-tools (apt-get install chromium)")
    return path


def open_page(url: str, script: str, *, settle_s: float = 0.5, timeout_s: float = 60.0) -> PageRun:
    """Load ``url`` in a fresh headless Chromium, wait for its load event (and
    ``settle_s``), evaluate ``script`` (its JSON value is :attr:`PageRun.value`)."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-"))
    process = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        port = _port(profile, process, timeout_s)
        pages = httpx.get(f"http://127.0.0.1:{port}/json", timeout=10).json()
        target = next(p for p in pages if p.get("type") == "page")
        return asyncio.run(asyncio.wait_for(_drive(target["webSocketDebuggerUrl"], url, script, settle_s), timeout_s))
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)


def _port(profile: Path, process: subprocess.Popen, timeout_s: float) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"chromium exited with code {process.returncode} before listening")
        if marker.exists() and (text := marker.read_text().split()):
            return int(text[0])
        time.sleep(0.05)
    raise AssertionError("chromium did not open its DevTools port")


async def _drive(ws_url: str, url: str, script: str, settle_s: float) -> PageRun:
    run = PageRun()
    async with websockets.connect(ws_url, max_size=None) as ws:
        ids = iter(range(1, 10**9))
        pending: dict[int, asyncio.Future] = {}
        loaded = asyncio.Event()

        async def receive() -> None:
            async for raw in ws:
                msg = json.loads(raw)
                if "id" in msg and msg["id"] in pending:
                    pending.pop(msg["id"]).set_result(msg)
                    continue
                method, params = msg.get("method"), msg.get("params", {})
                if method == "Runtime.exceptionThrown":
                    details = params["exceptionDetails"]
                    run.exceptions.append(details.get("exception", {}).get("description") or details.get("text", ""))
                elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                    run.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
                elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                    run.console_errors.append(params["entry"].get("text", ""))
                elif method == "Network.requestWillBeSent":
                    run.requests.append(params["request"]["url"])
                elif method == "Page.loadEventFired":
                    loaded.set()

        async def call(method: str, **params: object) -> dict:
            number = next(ids)
            pending[number] = asyncio.get_running_loop().create_future()
            await ws.send(json.dumps({"id": number, "method": method, "params": params}))
            answer = await pending[number]
            if "error" in answer:
                raise AssertionError(f"{method}: {answer['error']}")
            return answer.get("result", {})

        reader = asyncio.create_task(receive())
        for domain in ("Runtime", "Log", "Network", "Page"):
            await call(f"{domain}.enable")
        await call("Page.navigate", url=url)
        await loaded.wait()
        await asyncio.sleep(settle_s)
        result = await call("Runtime.evaluate", expression=script, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            run.exceptions.append(str(result["exceptionDetails"].get("exception", {}).get("description")))
        run.value = result.get("result", {}).get("value")
        reader.cancel()
    return run

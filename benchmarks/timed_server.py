"""An OpenAI-compatible streaming server whose timing is known exactly: the benchmarks' ground truth.

The program around :mod:`benchmarks.common.timed_server` (which says what it serves and
records); bound to 127.0.0.1 only, importable without vLLM or Ray.

    .venv/bin/python -m benchmarks.timed_server --ttft 0.1 --itl 0.02 --port 8300
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from pydantic import ValidationError

from benchmarks.common.servers import HOST
from benchmarks.common.timed_answers import TimedConfig
from benchmarks.common.timed_server import TimedServer, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttft", type=float, default=0.1, help="seconds to the first token (default 0.1)")
    parser.add_argument("--itl", type=float, default=0.02, help="seconds between tokens (default 0.02)")
    parser.add_argument("--port", type=int, default=8300, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--model", default="timed", help="served model name (default timed)")
    parser.add_argument("--eos-after", type=int, default=None, help="without ignore_eos, stop after N tokens")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args(argv)
    try:
        config = TimedConfig(ttft_s=args.ttft, itl_s=args.itl, model=args.model, eos_after=args.eos_after)
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = "--" + str(error["loc"][0]).removesuffix("_s").replace("_", "-")
        print(f"timed_server: invalid {flag}: {error['msg']}", file=sys.stderr)
        return 2

    async def run() -> TimedServer:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        return await serve(config, args.port, stop=stop,
                           ready=lambda port: print(f"timed server on http://{HOST}:{port}", flush=True))

    try:
        if args.loop == "uvloop":
            import uvloop

            uvloop.run(run())
        else:
            asyncio.run(run())
    except OSError as exc:
        print(f"timed_server: cannot listen on {HOST}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m serving.manifests render ...``: the render command on its own.

Same arguments as ``serving render``; models come from ``$SERVEOUT_MODELS_DIR`` or
the repository's ``models/`` folder.
"""

from __future__ import annotations

import argparse
import sys

from serving.errors import ServeoutError
from serving.manifests.command import add_render_command
from serving.model_store import models_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.manifests")
    add_render_command(parser.add_subparsers(dest="command", required=True), models_dir=models_dir)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ServeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Loading the target model's tokenizer from a local folder (never from a hub)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

from loadtest.errors import WorkloadError


def default_tokenizer_path(model: str) -> Path:
    """``$SERVEOUT_HOME/models/<model>`` (``SERVEOUT_HOME`` defaults to ``~/.cache/serveout``)."""
    home = Path(os.environ.get("SERVEOUT_HOME", Path.home() / ".cache" / "serveout"))
    return home / "models" / model


@cache
def _load(path: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def load_tokenizer(path: Path) -> Any:
    """The Hugging Face tokenizer saved in ``path``; :class:`WorkloadError` if absent."""
    if not (path / "tokenizer_config.json").is_file() and not (path / "tokenizer.json").is_file():
        raise WorkloadError(
            f"no tokenizer in {path}; pass --tokenizer PATH (a local Hugging Face model folder)"
        )
    try:
        return _load(str(path.resolve()))
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"cannot load the tokenizer in {path}: {exc}") from None

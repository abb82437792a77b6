"""Where the repository's folders are, for tests at any depth."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "models"
SWEEPS = REPO / "sweeps"

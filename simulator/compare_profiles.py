"""Two hardware profiles' step-time constants side by side (e.g. a GPU measured with
``scripts/calibrate-gpu`` against the profile fitted to published measurements)::

    python -m simulator.compare_profiles h200 results/h200-measured.yaml
"""

from __future__ import annotations

import sys

from simulator.accuracy import band_for
from simulator.hardware import Efficiencies, load_hardware


def rows(a: Efficiencies, b: Efficiencies) -> list[tuple[str, float | None, float | None, str]]:
    """(constant, first, second, change) for every efficiency field (pure)."""
    out = []
    for name in Efficiencies.model_fields:
        x, y = getattr(a, name), getattr(b, name)
        vx, vy = (x.value if x else None), (y.value if y else None)
        change = f"{(vy / vx - 1) * 100:+.1f}%" if vx and vy is not None else "-"
        out.append((name, vx, vy, change))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    first, second = (load_hardware(x) for x in argv)
    print(f"{'constant':<32} {argv[0]:>14} {argv[1]:>14} change")
    for name, x, y, change in rows(first.efficiency, second.efficiency):
        print(f"{name:<32} {x if x is not None else '-':>14} {y if y is not None else '-':>14} {change}")
    band = band_for(argv[0])
    if band:
        print(f"{argv[0]}'s published-data error band: {band.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Exactly rounded sums of large float arrays, vectorised (pure).

:func:`math.fsum` gives the sum of its inputs rounded once, but it takes Python floats:
tens of millions of them (a simulated hour's inter-token gaps) cost seconds and
gigabytes. These give the same float with numpy: every finite double is an integer
mantissa times a power of two, and integers add up exactly.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

_BLOCK = 1 << 20  # values per block (temporaries of a few MB)
_PART_BITS = 18  # mantissa parts: sums of up to 2**35 parts stay exact in float64
_PART_MASK = (1 << _PART_BITS) - 1


def exact_sum(values: np.ndarray) -> float:
    """``math.fsum(values)``, the exactly rounded sum (non-finite values: by ``fsum``).

    Each value is ``mantissa * 2**(exponent - 53)`` with an integer mantissa below
    2**53 (:func:`numpy.frexp`); the mantissas are cut into 18-bit parts, summed per
    exponent with :func:`numpy.bincount` (exact: each total stays below 2**53), and
    the totals are combined as Python integers, whose division rounds correctly
    (half to even, as ``fsum``)."""
    values = np.asarray(values, dtype=float).ravel()
    if not np.isfinite(values).all():
        return math.fsum(values.tolist())
    totals: defaultdict[int, int] = defaultdict(int)  # power of two -> integer total
    for first in range(0, len(values), _BLOCK):
        fractions, exponents = np.frexp(values[first:first + _BLOCK])
        mantissas = (fractions * 2.0**53).astype(np.int64)
        low = int(exponents.min())
        bins = exponents - low
        for shift in (0, _PART_BITS, 2 * _PART_BITS):
            part = mantissas >> shift
            if shift < 2 * _PART_BITS:
                part &= _PART_MASK  # the top part keeps the sign
            sums = np.bincount(bins, weights=part, minlength=1)
            for k in np.flatnonzero(sums).tolist():
                totals[low + k - 53 + shift] += int(sums[k])
    if not totals:
        return 0.0
    base = min(totals)
    numerator = sum(total << (power - base) for power, total in totals.items())
    return float(numerator << base) if base >= 0 else numerator / (1 << -base)


def exact_products(values: np.ndarray, counts: np.ndarray) -> list[float]:
    """Floats whose exact sum is the exact sum of ``values[i] * counts[i]`` (non-negative
    integer counts below 2**26): each value is split into two halves of at most 27
    significant bits (Veltkamp), whose products with the counts are exact; so
    ``fsum`` of them is ``fsum`` of every value repeated ``counts[i]`` times."""
    values = np.asarray(values, dtype=float)
    counts = np.asarray(counts)
    if len(counts) and counts.max() >= 2**26:
        raise ValueError("counts must be below 2**26")
    scaled = values * 134217729.0  # 2**27 + 1
    high = scaled - (scaled - values)
    low = values - high
    counts = counts.astype(float)
    return np.concatenate([high * counts, low * counts]).tolist()

"""Figures per model, for a stage whose requests named several (``--model-mix``): the
summary's :class:`ModelFigures` (pure).

:func:`loadtest.analysis.group_figures.model_figures` computes them over the measured
requests (:mod:`loadtest.analysis.per_group`); goodput counts against the run's SLO.
"""

from __future__ import annotations

import numpy as np

from loadtest.analysis.per_group import GroupFigures, groups


class ModelFigures(GroupFigures):
    """One model's measured requests and their figures."""

    model: str


def model_groups(models: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Each model of ``models`` (one name per record) with the mask of its records, the
    most requested first (then by name); empty when there are fewer than two."""
    return groups(models)

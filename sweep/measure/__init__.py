"""Measuring one trial: load points and run records, SLO verdicts, sampling, and the two
measurers behind :class:`sweep.search.loop.Measure` (a real deployment, the simulator)."""

"""Run records -> figures (pure): per-run rows, scaling efficiencies, the answer and the Pareto front."""

"""The capacity model and what is planned with it (pure but for the PNG in :mod:`sweep.capacity.plot`):
replicas per traffic level, where more GPUs stop paying, the cheapest mix of GPU kinds."""

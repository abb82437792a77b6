"""The sweep's inputs and what they define (pure but for YAML reading in :mod:`sweep.spec.files`):
the spec, the price table and cost maths, deployment candidates and the search space."""

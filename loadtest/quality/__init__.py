"""The quality probe: a fixed evaluation set asked at temperature 0, graded by exact or
JSON field match, scored with a Wilson interval (docs/loadtest.md, "Quality probe").

``items`` (the item schema and the file), ``grading`` and ``wilson`` are pure; ``probe``
asks a target over HTTP; ``results`` turns grades into the score and its tables;
``command`` is ``loadtest quality``.
"""

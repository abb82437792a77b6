"""The sweep's outputs: ``sweep.json`` (built purely), ``report.md``, the PNG plots and the results folder."""

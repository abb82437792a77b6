"""The sweep: find the cheapest configuration that meets an SLO at a target traffic.

The one package that imports both :mod:`loadtest` and :mod:`serving`. Nothing is
exported here: import from the module that defines a name (docs/sweep.md lists them).
I/O lives in :mod:`sweep.spec.files` (YAML), :mod:`sweep.report.folder` and
:mod:`sweep.search.loop` (files), :mod:`sweep.report.plots` (PNGs), :mod:`sweep.measure.serveout`
(Ray, HTTP) and :mod:`sweep.cli`; every other module is pure.
"""

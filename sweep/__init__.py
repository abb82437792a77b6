"""The sweep: find the cheapest configuration that meets an SLO at a target traffic.

The one package that imports both :mod:`loadtest` and :mod:`serving`. Nothing is
exported here: import from the module that defines a name (docs/sweep.md lists them).
I/O lives in :mod:`sweep.spec_file` (YAML), :mod:`sweep.results_folder` and
:mod:`sweep.loop` (files), :mod:`sweep.report_plots` (PNGs), :mod:`sweep.measurer`
(Ray, HTTP) and :mod:`sweep.cli`; every other module is pure.
"""

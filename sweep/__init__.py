"""The sweep: find the cheapest configuration that meets an SLO at a target traffic.

The one package that imports both :mod:`loadtest` and :mod:`serving` (and may import
:mod:`simulator`). Nothing is exported here or by a subpackage: import from the module
that defines a name (docs/sweep.md lists them). The subpackages depend downwards:

    spec/       the inputs: the spec, prices and cost maths, deployment candidates, the space
    measure/    one trial: load points, verdicts, sampling, what a candidate deploys, the
                real and the simulated measurer
    analysis/   run records -> per-run figures, scaling efficiencies, the answer
    capacity/   the capacity model, the plans made with it, the cheapest mix of GPU kinds
    report/     sweep.json, report.md, the plots, the console table, the results folder
    search/     the strategies and the loop that measures, persists and reports
    commands/   ``sweep run | plan | mix``, dispatched by :mod:`sweep.cli`

I/O lives in :mod:`sweep.spec.files` (YAML), :mod:`sweep.measure.models` (model specs),
:mod:`sweep.measure.serveout` (Ray, HTTP), :mod:`sweep.measure.simulated` (hardware
profiles), :mod:`sweep.report.folder` and :mod:`sweep.search.loop` (files),
:mod:`sweep.report.plots` and :mod:`sweep.capacity.plot` (PNGs), :mod:`sweep.report.console`,
:mod:`sweep.commands` and :mod:`sweep.cli`; every other module is pure.
"""

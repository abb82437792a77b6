"""The load generator: the only part of loadtest that imports Locust (and gevent).

It runs in its own process (``python -m loadtest.generator JOB.json``), started by the
orchestrator (:mod:`loadtest.runner`); :mod:`loadtest.generator.job` and
:mod:`loadtest.generator.context` are gevent-free so the orchestrator and the tests can
import them.
"""

"""The load generator: the only part of loadtest that imports Locust (and gevent).

It runs in its own processes (``python -m loadtest.generator``), started by the
orchestrator (:mod:`loadtest.run.orchestrator`): one process per stage or, distributed, a master
(:mod:`.master`) and worker processes (:mod:`.worker`). :mod:`.job`, :mod:`.context` and
:mod:`.workers` are gevent-free so the orchestrator and the tests can import them;
:mod:`.priority` (standard library only) runs first in every generator process.
"""

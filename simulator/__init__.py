"""serveout's simulator: vLLM replicas (continuous batching, paged KV with prefix
caching, preemption; a calibrated step-time model) behind serveout's own router,
admission control and autoscaling policy, driven by the load tester's traffic.

The API the sweep and the planner call (docs/simulator.md), each from its module:

- :class:`~simulator.config.SimulationConfig` - the cluster (hardware, model, replicas, TP, routing, ...);
- :func:`simulator.simulate.simulate` ``(LoadTestConfig, SimulationConfig) -> SimulationResult`` - its
  ``summary`` is the load tester's :class:`~loadtest.analysis.summary.Summary`;
- :func:`simulator.simulate.write_simulation` - ``summary.json``, the reports and ``simulation.json``;
- :func:`simulator.replica_setup.replica_setup`, :class:`simulator.step_time.StepTimeModel`,
  :func:`simulator.hardware.load_hardware` - the parts.
"""

"""A vLLM stat logger that keeps one replica's live load and cumulative counters.

vLLM calls ``record`` after every engine step with the same ``SchedulerStats`` /
``IterationStats`` its own Prometheus logger turns into ``vllm:num_requests_waiting``,
``vllm:prefix_cache_hits_total`` and friends; we keep the numbers so the replica can
report them for routing, autoscaling and the gateway's metrics. Imported only
inside engine replicas (it imports vLLM).
"""

from __future__ import annotations

import dataclasses

from vllm.v1.metrics.loggers import PrometheusStatLogger, StatLoggerBase

from serving.engine.protocol import EngineStats


class EngineStatsRecorder:
    """Accumulates engine stats; ``factory`` is what vLLM's ``stat_loggers`` takes."""

    def __init__(self, replica_id: str) -> None:
        self._stats = EngineStats(replica_id=replica_id)

    def snapshot(self) -> EngineStats:
        return self._stats

    def factory(self, vllm_config, engine_index: int = 0) -> StatLoggerBase:
        return _RecorderLogger(self)

    @property
    def stat_loggers(self) -> list:
        """What vLLM's ``stat_loggers`` takes: this recorder, and no Prometheus logger.

        vLLM adds its own ``PrometheusStatLogger`` unless one is given. Its histograms
        observe every output token (inter-token latency) and every request, in the replica
        process; serveout's gateway measures those figures itself and exports the engine's
        load as ``serveout_engine_*``, so vLLM's is replaced by one that records nothing."""
        return [self.factory, _NoPrometheus]

    def _record(self, scheduler_stats, iteration_stats) -> None:
        s = self._stats
        updates: dict = {}
        if scheduler_stats is not None:
            prefix = scheduler_stats.prefix_cache_stats
            updates.update(
                waiting=scheduler_stats.num_waiting_reqs + scheduler_stats.num_skipped_waiting_reqs,
                running=scheduler_stats.num_running_reqs,
                kv_cache_usage=float(scheduler_stats.kv_cache_usage),
                prefix_cache_queries=s.prefix_cache_queries + prefix.queries,
                prefix_cache_hits=s.prefix_cache_hits + prefix.hits,
                adapters_active=tuple(sorted(name for name, n in scheduler_stats.running_lora_adapters.items() if n)),
            )
        if iteration_stats is not None:
            updates.update(
                prompt_tokens=s.prompt_tokens + iteration_stats.num_prompt_tokens,
                generation_tokens=s.generation_tokens + iteration_stats.num_generation_tokens,
            )
        if updates:
            self._stats = dataclasses.replace(s, **updates)


class _RecorderLogger(StatLoggerBase):
    def __init__(self, recorder: EngineStatsRecorder) -> None:  # noqa: D107 (vLLM signature)
        self._recorder = recorder

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
        self._recorder._record(scheduler_stats, iteration_stats)

    def log_engine_initialized(self) -> None:
        pass


class _NoPrometheus(PrometheusStatLogger):
    """Takes the place of vLLM's Prometheus logger: no ``vllm:`` series, no per-token cost."""

    def __init__(self, vllm_config, engine_indexes: list[int] | None = None) -> None:  # noqa: D107
        self.engine_indexes = engine_indexes or [0]

    def record(self, *args, **kwargs) -> None:
        pass

    def record_admission_rejection(self, reason: str) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass

    def log(self) -> None:
        pass

"""Where every rollout step is recorded: a log line, Prometheus metrics (labels: the
public model name, a phase or an outcome: bounded sets) and, when the stack keeps one,
an entry in the audit trail (its own chain, writer ``rollout``)."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from serving.config.tenancy import AuditSpec
from serving.rollout.machine import Phase, Rollout
from serving.tenancy.audit_files import AuditWriter

log = logging.getLogger("serveout.rollout")

HISTORY = 200
"""Lines kept per rollout for ``serving rollout status``."""


class RolloutRecorder:
    """Records rollouts' transitions and verdicts; ``history`` holds the latest lines."""

    def __init__(self, registry: CollectorRegistry, audit: AuditSpec, home: Path) -> None:
        self.percent = Gauge("serveout_rollout_canary_percent", "The canary's share of a model name's traffic.",
                             ["model"], registry=registry)
        self.phase = Gauge("serveout_rollout_phase", "1 for the phase a model's latest rollout is in.",
                           ["model", "phase"], registry=registry)
        self.transitions = Counter("serveout_rollout_transitions", "Rollout transitions, by the phase entered.",
                                   ["model", "phase"], registry=registry)
        self.verdicts = Counter("serveout_rollout_verdicts", "Step verdicts on canaries, by outcome.",
                                ["model", "outcome"], registry=registry)
        self._audit_dir = (audit.dir or home / "run" / "audit") if audit.enabled else None
        self._max_file_bytes = audit.max_file_bytes
        self._writer: AuditWriter | None = None
        self._lock = threading.Lock()
        self.history: list[dict] = []

    def transition(self, rollout: Rollout, line: str) -> None:
        """``rollout`` entered its phase (or stayed, with a new ``line``)."""
        model = rollout.plan.model
        self.percent.labels(model).set(rollout.percent)
        for phase in Phase:
            self.phase.labels(model, phase.value).set(1 if phase is rollout.phase else 0)
        self.transitions.labels(model, rollout.phase.value).inc()
        self._write({"event": "rollout", "model": model, "stable": rollout.stable, "canary": rollout.plan.canary,
                     "phase": rollout.phase.value, "percent": rollout.percent, "line": line})

    def verdict(self, rollout: Rollout, outcome: str, line: str) -> None:
        self.verdicts.labels(rollout.plan.model, outcome).inc()
        if outcome != "wait":
            self._write({"event": "rollout_verdict", "model": rollout.plan.model, "canary": rollout.plan.canary,
                         "percent": rollout.percent, "outcome": outcome, "line": line})

    def _write(self, fields: dict) -> None:
        entry = {"at": time.time(), **fields}
        log.info(json.dumps(entry))
        with self._lock:
            self.history = [*self.history[-(HISTORY - 1):], entry]
            if self._audit_dir is None:
                return
            try:
                self._writer = self._writer or AuditWriter(self._audit_dir, "rollout",
                                                           max_file_bytes=self._max_file_bytes)
                self._writer.write([entry])
            except OSError as exc:  # the rollout goes on; the log line above has it
                log.warning("rollout: the audit trail could not be written: %s", exc)

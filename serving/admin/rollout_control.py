"""``serving rollout``'s I/O: an adapter canary beside the stable adapter of a model
name, stepped through its traffic shares by :class:`~serving.rollout.machine.Rollout`
in a thread of the ``serving up`` process (the admin endpoint's).

At each step the traffic split is redeployed (the adapters' ``user_config`` path: no
engine restarts, the same replicas serve both versions, so capacity never changes),
the stack's ``/metrics`` is scraped until the canary has served ``min_requests``, and
the step is judged (:mod:`serving.rollout.judge`) with the quality probe's scores,
measured once before the canary's first request (its weights do not change between
steps). A retired version first gets no new requests, then its requests in flight
drain (its in-flight gauge at 0, or ``drain_s``), then it is unloaded: nothing in
flight is cut.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx

from serving.admin.adapter_control import AdapterControl
from serving.admin.rollout_record import RolloutRecorder
from serving.config.rollout import RolloutPlan, TrafficSplit
from serving.errors import InvalidRequestError, ModelNotFoundError, ServeoutError
from serving.rollout.evidence import Evidence, VersionCounts
from serving.rollout.judge import Outcome, judge, quality_regression
from serving.rollout.machine import Action, ActionKind, Phase, Rollout
from serving.rollout.scrape import version_counts


class RolloutControl:
    """Starts, steps, promotes and aborts rollouts on the stack ``adapters`` changes;
    ``url``/``headers``: the stack's endpoint (metrics and the probe); ``probe(plan, name)``:
    the quality probe (:func:`serving.admin.quality_probe.probe_quality`)."""

    def __init__(self, adapters: AdapterControl, recorder: RolloutRecorder, *, url: str,
                 headers: dict[str, str], probe: Callable[[RolloutPlan, str], tuple[int, int]],
                 poll_s: float = 2.0) -> None:
        self._adapters, self._recorder, self._url, self._headers = adapters, recorder, url, headers
        self._probe, self._poll_s = probe, poll_s
        self._lock = threading.Lock()
        self._rollout: Rollout | None = None
        self._started_at = 0.0  # the latest rollout's start (its status shows its own lines)
        self._pending: Action | None = None
        self._wake = threading.Event()

    def status(self) -> dict:
        """The latest rollout (running or not) and its recorded lines."""
        with self._lock:
            rollout, since = self._rollout, self._started_at
        if rollout is None:
            return {"object": "rollout", "phase": None}
        return {"object": "rollout", "model": rollout.plan.model, "stable": rollout.stable,
                "canary": rollout.plan.canary, "phase": rollout.phase.value, "percent": rollout.percent,
                "steps": list(rollout.plan.steps), "reason": rollout.reason,
                "history": [e for e in self._recorder.history
                            if e.get("model") == rollout.plan.model and e["at"] >= since]}

    def start(self, plan: RolloutPlan) -> dict:
        """Load the canary (answers once it serves, or raises why not: the stable
        version keeps serving) and start stepping in the background."""
        with self._lock:
            if self._rollout is not None and self._rollout.running:
                raise InvalidRequestError(f"a rollout of {self._rollout.plan.model!r} is running "
                                          f"({self._rollout.phase}); promote or abort it first", param="model")
            stable, base = self._stable_of(plan.model)
            if plan.canary in self._adapters.config.served_names:
                raise InvalidRequestError(f"{plan.canary!r} is already served: name the canary anew",
                                          param="canary")
            started = self._rollout = Rollout(plan, stable)
            self._started_at = time.time()
        self._recorder.transition(started, f"starting: {plan.canary} beside {stable} for {plan.model}")
        try:
            self._adapters.load(plan.canary, str(plan.path) if plan.path else None, plan.rank, base=base)
        except Exception as exc:  # refused, or the redeploy failed: stable serves on, unchanged
            self._move(lambda r: r.load_failed(str(exc)))
            if isinstance(exc, ServeoutError):
                raise
            raise ServeoutError(f"loading {plan.canary} failed: {exc}") from exc
        self._move(lambda r: r.loaded())
        threading.Thread(target=self._run, name="serveout-rollout", daemon=True).start()
        return self.status()

    def promote(self) -> dict:
        self._move(lambda r: r.promote())
        return self.status()

    def abort(self) -> dict:
        self._move(lambda r: r.abort())
        return self.status()

    def _stable_of(self, model: str) -> tuple[str, str]:
        """The adapter serving ``model`` now, and its base model."""
        config = self._adapters.config
        split = next((s for s in config.splits if s.name == model), None)
        stable = split.stable if split is not None else model
        parents = {a.name: parent for parent, a in self._adapters.adapters()}
        if stable in parents:
            return stable, parents[stable]
        if model in config.served_names:
            raise InvalidRequestError(f"{model!r} is a base model: a rollout splits an adapter's traffic "
                                      "(its stable and canary versions are adapters on one base)", param="model")
        raise ModelNotFoundError(f"model {model!r} is not served; the stack serves "
                                 f"{', '.join(config.served_names)}", param="model")

    def _move(self, transition: Callable[[Rollout], tuple[Rollout, Action, str]]) -> None:
        """Apply ``transition``; its action is the rollout thread's to carry out."""
        with self._lock:
            if self._rollout is None:
                raise InvalidRequestError("no rollout has started", param="model")
            self._rollout, action, line = transition(self._rollout)
            if action.kind is not ActionKind.NONE:
                self._pending = action
            self._recorder.transition(self._rollout, line)  # under the lock: status sees both
        self._wake.set()

    def _try_move(self, transition: Callable[[Rollout], tuple[Rollout, Action, str]]) -> None:
        """A transition of the rollout's own thread, unless the operator's came first."""
        try:
            self._move(transition)
        except InvalidRequestError as exc:
            with self._lock:
                rollout = self._rollout
            self._recorder.verdict(rollout, "wait", f"skipped: {exc}")

    def _run(self) -> None:
        """The rollout's thread: carry out actions, judge steps, until it ends."""
        quality: dict[str, tuple[int, int]] | None = None  # None: not probed yet
        window: tuple[dict[str, VersionCounts], float] | None = None
        while True:
            with self._lock:
                rollout, action, self._pending = self._rollout, self._pending, None
            if action is not None:
                if action.kind is ActionKind.SET_WEIGHT and quality is None and rollout.plan.quality.enabled:
                    quality = self._quality(rollout)
                    why = quality_regression(quality, rollout.plan.judge)
                    if why is not None:  # before the canary's first user request
                        self._recorder.verdict(rollout, Outcome.FAIL.value, why)
                        self._try_move(lambda r: r.abort(f"quality: {why}"))
                        continue
                try:
                    self._execute(rollout, action)
                except Exception as exc:  # a failed redeploy: roll back (stable still serves)
                    self._recorder.transition(rollout, f"{action.kind} failed: {exc}")
                    if rollout.phase is Phase.STEPPING:
                        self._try_move(lambda r: r.abort(f"{action.kind} failed: {exc}"))
                    continue
                if action.kind is ActionKind.SET_WEIGHT:
                    window = None  # taken at the step's first readable scrape
                else:
                    self._try_move(lambda r: r.retired())
                continue
            if not rollout.running:
                return
            if rollout.phase is Phase.STEPPING:
                if window is None:
                    window = self._window(rollout)
                else:
                    self._judge_step(rollout, window, quality or {})
            self._wake.wait(self._poll_s)
            self._wake.clear()

    def _window(self, rollout: Rollout) -> tuple[dict[str, VersionCounts], float] | None:
        """A step's starting scrape and time (None: the metrics are unreadable now)."""
        try:
            return self._scrape(rollout), time.monotonic()
        except (httpx.HTTPError, ValueError) as exc:
            self._recorder.verdict(rollout, "wait", f"metrics unreadable: {exc}")
            return None

    def _judge_step(self, rollout: Rollout, window: tuple[dict[str, VersionCounts], float],
                    quality: dict[str, tuple[int, int]]) -> None:
        before, started = window
        try:
            now = self._scrape(rollout)
        except (httpx.HTTPError, ValueError) as exc:
            self._recorder.verdict(rollout, "wait", f"metrics unreadable: {exc}")
            return
        evidence = Evidence(now[rollout.stable].since(before[rollout.stable]),
                            now[rollout.plan.canary].since(before[rollout.plan.canary]), quality)
        timed_out = time.monotonic() - started > rollout.plan.judge.step_timeout_s
        verdict = judge(evidence, rollout.plan.judge, timed_out=timed_out)
        self._recorder.verdict(rollout, verdict.outcome.value, "; ".join((*verdict.findings, *verdict.reasons)))
        if verdict.outcome is Outcome.WAIT:
            return
        with self._lock:
            current = self._rollout
        if current is rollout:  # the operator did not step in meanwhile
            self._try_move(lambda r: r.judged(verdict))

    def _quality(self, rollout: Rollout) -> dict[str, tuple[int, int]]:
        """Both versions' probe scores, before the canary's first request (a failed probe
        counts as no score: the step is then judged on traffic alone, and says so)."""
        scores = {}
        for version, name in (("stable", rollout.stable), ("canary", rollout.plan.canary)):
            try:
                scores[version] = self._probe(rollout.plan, name)
            except Exception as exc:  # noqa: BLE001 (no score: judged on traffic alone, and said)
                self._recorder.verdict(rollout, "wait", f"quality probe of {name}: {exc}")
                return {}
        return scores

    def _execute(self, rollout: Rollout, action: Action) -> None:
        plan, stable = rollout.plan, rollout.stable
        others = tuple(s for s in self._adapters.config.splits if s.name != plan.model)
        if action.kind is ActionKind.SET_WEIGHT:
            split = TrafficSplit(name=plan.model, stable=stable, canary=plan.canary, canary_percent=action.percent)
            self._adapters.route((*others, split))
            return
        promoting = action.kind is ActionKind.RETIRE_STABLE
        retired, kept = (stable, plan.canary) if promoting else (plan.canary, stable)
        self._adapters.route((*others, TrafficSplit(name=plan.model, stable=stable, canary=plan.canary,
                                                    canary_percent=100.0 if promoting else 0.0)))
        self._drain(rollout, retired)
        final = () if kept == plan.model else (TrafficSplit(name=plan.model, stable=kept),)
        self._adapters.route((*others, *final), unload=retired)

    def _drain(self, rollout: Rollout, retired: str) -> None:
        """Wait until ``retired`` has no request in flight (two scrapes in a row), at most ``drain_s``."""
        deadline, idle = time.monotonic() + rollout.plan.drain_s, 0
        while time.monotonic() < deadline and idle < 2:
            time.sleep(min(self._poll_s, 1.0))
            try:
                idle = idle + 1 if self._scrape(rollout)[retired].in_flight == 0 else 0
            except (httpx.HTTPError, ValueError):
                idle = 0

    def _scrape(self, rollout: Rollout) -> dict[str, VersionCounts]:
        response = httpx.get(f"{self._url}/metrics", headers=self._headers, timeout=30)
        response.raise_for_status()
        return version_counts(response.text, (rollout.stable, rollout.plan.canary))

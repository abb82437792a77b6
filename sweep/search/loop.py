"""The sweep loop, written against the :class:`Measure` seam (no Ray, no Locust here).

The orchestration implements :class:`Measure`: deploy ``trial.candidate`` through
serving's app builder, wait until healthy, warm up, run the load tester in its own
process at the rates and with the samples :func:`sweep.measure.sampling.measure_rates`
asks for, tear down, and return a :class:`MeasuredResult`. Deployment failures,
crashes and tool errors are *returned* (status + reason), not raised; raising
:class:`SweepAborted` stops the whole sweep.

:func:`run_sweep` asks the strategy for the next trial, reuses a persisted record
that already covers it, otherwise measures and persists it at once, and rewrites
``sweep.json`` and ``report.md`` after every trial. Ctrl-C (``KeyboardInterrupt``)
and :class:`SweepAborted` leave a valid report with status ``interrupted`` /
``aborted`` before propagating; rerunning the same spec resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from loadtest.registry import Registry
from loadtest.workloads.text_density import TextDensities
from sweep.errors import SweepAborted, SweepError
from sweep.measure.results import MeasuredResult, RunRecord, RunStatus, Trial
from sweep.measure.verdicts import covers
from sweep.report.document import ReportStatus, RunCounts, SweepReport, build_report
from sweep.report.folder import ResultsFolder, now_iso
from sweep.report.markdown import render_markdown
from sweep.search.strategies import Strategy, create_strategy
from sweep.spec.economics import PriceTable
from sweep.spec.space import SearchSpace
from sweep.spec.sweep_spec import SweepSpec, measurement_fingerprint, simulated_label


class Measure(Protocol):
    """The seam the orchestration implements: measure one trial."""

    def measure(self, trial: Trial) -> MeasuredResult: ...


class SweepObserver(Protocol):
    """Progress callbacks (e.g. a rich progress display). ``number`` counts from 1.

    ``trial_started`` is called only before a real measurement; ``trial_finished``
    after every trial, with ``reused=True`` when the record came from the folder.
    ``grid_size`` bounds the number of trials (the search usually needs far fewer).
    Phases inside a trial (deploy, warm-up, load, teardown) are the measurer's own.
    """

    def trial_started(self, trial: Trial, number: int, grid_size: int) -> None: ...

    def trial_finished(self, record: RunRecord, number: int, reused: bool) -> None: ...


class SilentObserver:
    """An observer that shows nothing."""

    def trial_started(self, trial: Trial, number: int, grid_size: int) -> None:
        return None

    def trial_finished(self, record: RunRecord, number: int, reused: bool) -> None:
        return None


def measure_safely(measure: Measure, trial: Trial) -> MeasuredResult:
    """Run the measurer; an exception other than :class:`SweepAborted` becomes a tool
    error (it says nothing about the candidate, so the search never prunes on it)."""
    try:
        result = measure.measure(trial)
    except SweepAborted:
        raise
    except Exception as exc:  # a failing measurement must not stop the sweep
        return MeasuredResult(status=RunStatus.TOOL_ERROR, reason=f"measurer raised {type(exc).__name__}: {exc}")
    if not isinstance(result, MeasuredResult):
        return MeasuredResult(status=RunStatus.TOOL_ERROR, reason=f"measurer returned {type(result).__name__}")
    return result


def run_sweep(
    spec: SweepSpec,
    prices: PriceTable,
    measure: Measure,
    folder: ResultsFolder,
    *,
    registry: Registry[Strategy] | None = None,
    observer: SweepObserver | None = None,
    clock: Callable[[], str] = now_iso,
    retry_failed: bool = False,
    plots: bool = True,
    text_density: TextDensities | None = None,
) -> SweepReport:
    """Run (or resume) a sweep into ``folder`` and return its final report.

    ``retry_failed`` measures again candidates persisted as failed-to-deploy,
    crashed or tool errors instead of reusing them. ``plots`` writes PNGs into ``folder/plots``
    at the end. ``text_density`` (the model tokenizer's characters per token) adds the
    costs per character; ``None``: not measured. A simulated spec
    (:attr:`SweepSpec.simulated`) makes a simulated report (:attr:`SweepReport.simulated`):
    its first warning says so, and so do the titles of ``report.md`` and the plots.
    """
    space = SearchSpace(spec, prices)
    strategy = create_strategy(spec.search.strategy, registry)
    observer = observer or SilentObserver()
    fingerprint = measurement_fingerprint(spec)
    folder.clean()
    loaded = folder.load_runs(fingerprint)
    stored = loaded.by_id()
    if retry_failed:
        stored = {cid: rec for cid, rec in stored.items() if rec.ok}
    warnings = ([simulated_label(spec)] if spec.simulated else []) + list(loaded.skipped)
    history: dict[str, RunRecord] = {}
    measured = reused_count = 0

    def publish(status: ReportStatus) -> SweepReport:
        records = tuple(history.values())
        report = build_report(
            space,
            strategy.kind,
            records,
            status=status,
            generated_at=clock(),
            counts=RunCounts(measured=measured, reused=reused_count),
            notes=strategy.notes(space, records),
            warnings=warnings,
            text_density=text_density,
        )
        folder.write_report(report)
        folder.write_text("report.md", render_markdown(report))
        return report

    try:
        while (trial := strategy.next_trial(space, tuple(history.values()))) is not None:
            cid, number = trial.candidate.id, len(history) + 1
            if cid in history and covers(history[cid], trial.offered_rates, spec.slo):
                raise SweepError(f"strategy {strategy.kind!r} proposed {cid} again although it is measured")
            previous = stored.get(cid)
            reused = previous is not None and covers(previous, trial.offered_rates, spec.slo)
            if reused:
                assert previous is not None
                record = previous
            else:
                observer.trial_started(trial, number, space.grid_size)
                record = RunRecord(trial=trial, result=measure_safely(measure, trial))
                folder.save_run(record, fingerprint, clock())
                stored[cid] = record
            reused_count += reused
            measured += not reused
            history.pop(cid, None)
            history[cid] = record
            observer.trial_finished(record, number, reused)
            publish(ReportStatus.PARTIAL)
    except KeyboardInterrupt:
        publish(ReportStatus.INTERRUPTED)
        raise
    except SweepAborted as exc:
        warnings.append(f"sweep aborted by the measurer: {exc}")
        publish(ReportStatus.ABORTED)
        raise
    report = publish(ReportStatus.COMPLETE)
    if plots:
        # imported here: matplotlib costs ~0.8 s, which `sweep plan` and friends need not pay
        from sweep.report.plots import write_plots

        write_plots(report, folder.root / "plots")
    return report

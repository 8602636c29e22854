"""The orchestrator's own metrics, recorded from workflows through ``workflow.metric_meter()``.

The SDK's meter is replay-safe (nothing is recorded while a history replays) and exports
on the worker's SDK endpoint (``ORCHESTRATOR_METRICS_ADDRESS``) next to the SDK's own
metrics; counters gain ``_total`` there (``PrometheusConfig(counters_total_suffix=True)``).
Labels are bounded: runbook and task ids come from reviewed YAML, kinds and outcomes
from enums, jobs from the training cluster. docs/metrics.md lists every metric.
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio import workflow

__all__ = [
    "gate_hold",
    "load_test_ended",
    "load_test_step",
    "rebalancer_epoch",
    "rebalancer_paused",
    "recovery",
    "run_ended",
    "run_started",
    "task_ended",
    "task_running",
    "task_stopped",
    "training_failure",
]

Labels = Mapping[str, str | int | float | bool]


def _count(name: str, help_text: str, labels: Labels, value: int = 1) -> None:
    workflow.metric_meter().create_counter(name, help_text).add(value, labels)


def _observe(name: str, help_text: str, labels: Labels, value: float) -> None:
    workflow.metric_meter().create_histogram_float(name, help_text).record(value, labels)


def _gauge(name: str, help_text: str, labels: Labels, value: float) -> None:
    workflow.metric_meter().create_gauge_float(name, help_text).set(value, labels)


def run_started(kind: str, runbook: str) -> None:
    _count("orchestrator_runs_started", "Runs started.", {"kind": kind, "runbook": runbook})


def run_ended(kind: str, runbook: str, outcome: str, seconds: float) -> None:
    labels = {"kind": kind, "runbook": runbook, "outcome": outcome}
    _count("orchestrator_runs_ended", "Runs ended, by outcome.", labels)
    _observe("orchestrator_run_duration_seconds", "Run duration, start to end.", labels, seconds)


def task_ended(runbook: str, task: str, phase: str, seconds: float | None) -> None:
    labels = {"runbook": runbook, "task": task, "phase": phase}
    _count("orchestrator_tasks_ended", "Runbook tasks ended, by final phase.", labels)
    if seconds is not None:
        _observe("orchestrator_task_duration_seconds", "Runbook task duration.", labels, seconds)


def gate_hold(runbook: str, task: str) -> None:
    labels = {"runbook": runbook, "task": task}
    _count("orchestrator_gate_holds", "Times a task held at a step for failing gates.", labels)


def rebalancer_epoch(epoch: int, outcome: str, version: int | None, spread: float | None) -> None:
    """An epoch ended: ``published`` and ``unchanged`` leave a table in force that the
    rebalancer checked (its last good epoch); ``skipped`` and ``conflict`` do not."""
    _count("orchestrator_rebalancer_epochs", "Rebalancer epochs, by outcome.", {"outcome": outcome})
    _gauge("orchestrator_rebalancer_epoch", "The rebalancer's last epoch.", {}, epoch)
    if outcome in ("published", "unchanged"):
        _gauge(
            "orchestrator_rebalancer_last_good_epoch",
            "Last epoch that published or confirmed the routing table.",
            {},
            epoch,
        )
    if version is not None:
        _gauge(
            "orchestrator_rebalancer_published_version",
            "Routing version the rebalancer last published or confirmed.",
            {},
            version,
        )
    if spread is not None:
        _gauge(
            "orchestrator_rebalancer_utilization_spread",
            "Max minus min utilization of active regions, before the epoch's table.",
            {},
            spread,
        )


def rebalancer_paused(paused: bool) -> None:
    _gauge("orchestrator_rebalancer_paused", "1 while the rebalancer is paused.", {}, paused)


def load_test_step(region: str, band: str, load: float, capacity: float | None) -> None:
    """A load-test step was judged: its band (ok, warn, stop, ...) and the load it put on."""
    labels = {"region": region}
    _count(
        "orchestrator_load_test_steps", "Load-test steps judged, by band.", {**labels, "band": band}
    )
    _gauge("orchestrator_load_test_load", "Load of the last step (share of demand).", labels, load)
    if capacity is not None:
        _gauge(
            "orchestrator_load_test_capacity_estimate",
            "The region's theoretical capacity the test steps against.",
            labels,
            capacity,
        )


def load_test_ended(region: str, outcome: str) -> None:
    labels = {"region": region, "outcome": outcome}
    _count("orchestrator_load_tests_ended", "Load tests ended, by outcome.", labels)


def training_failure(job: str, reason: str) -> None:
    labels = {"job": job, "reason": reason}
    _count("orchestrator_training_failures", "Training job failures seen.", labels)


def recovery(job: str, mttd_s: float | None, mttr_s: float | None, ettr: float | None) -> None:
    labels = {"job": job}
    if mttd_s is not None:
        _observe("orchestrator_training_mttd_seconds", "Time to detect a failure.", labels, mttd_s)
    if mttr_s is not None:
        _observe(
            "orchestrator_training_mttr_seconds", "Time to recover from a failure.", labels, mttr_s
        )
    if ettr is not None:
        _gauge("orchestrator_training_ettr_ratio", "Effective training time ratio.", labels, ettr)


def task_running(
    runbook: str, region: str, task: str, started_at: float, expected_s: float | None
) -> None:
    """A task started: when (Unix seconds) and its p75 from past runs, for the stuck alert.

    ``region`` (the run's region parameter, "" without one) keeps two drains of one
    runbook in different regions, which may run at once, on series of their own.
    """
    labels = {"runbook": runbook, "region": region, "task": task}
    _gauge("orchestrator_task_running", "1 while the task runs.", labels, 1)
    _gauge(
        "orchestrator_task_started_timestamp_seconds",
        "When the task last started.",
        labels,
        started_at,
    )
    if expected_s is not None:
        _gauge(
            "orchestrator_task_expected_seconds",
            "The task's p75 duration over past runs.",
            labels,
            expected_s,
        )


def task_stopped(runbook: str, region: str, task: str) -> None:
    labels = {"runbook": runbook, "region": region, "task": task}
    _gauge("orchestrator_task_running", "1 while the task runs.", labels, 0)

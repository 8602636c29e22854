"""Each workflow type's summary rows and sections, and the page for any report."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from html import escape
from typing import Any

from orchestrator.reports.charts import (
    load_steps_chart,
    load_test_curve_chart,
    rebalancer_shares_chart,
    rebalancer_utilization_chart,
)
from orchestrator.reports.charts_gates import runbook_gate_charts
from orchestrator.reports.charts_incident import incident_timeline_chart
from orchestrator.reports.charts_timeline import (
    run_origin,
    runbook_gantt_chart,
    runbook_share_chart,
    training_steps_chart,
)
from orchestrator.reports.models import (
    LoadTestReport,
    RebalancerReport,
    Report,
    RunbookReportView,
    TrainingReport,
    failures_during,
    moves_during,
)
from orchestrator.reports.render import page, percent, seconds, table

__all__ = ["load_test", "rebalancer", "render_report", "runbook", "training"]

Summary = list[tuple[str, Any]]
#: runbook events that record an operator's decision (the rest are the run's own)
OPERATOR_WORDS = ("overrid", "approved", "approval", "skipped by", "paused by", "resumed by",
                  "abort", "rejected")  # fmt: skip


def render_report(report: Report) -> str:
    """The whole page for one run, chosen by its workflow type."""
    if isinstance(report, RebalancerReport):
        summary, body = rebalancer(report)
    elif isinstance(report, LoadTestReport):
        summary, body = load_test(report)
    elif isinstance(report, RunbookReportView):
        summary, body = runbook(report)
    else:
        summary, body = training(report)
    return page(report.header, summary, body)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{n} {name}" for name, n in sorted(counter.items()))


def _h2(text: str) -> str:
    return f"<h2>{text}</h2>"


def rebalancer(report: RebalancerReport) -> tuple[Summary, list[str]]:
    status = report.status
    outcomes = Counter(e.outcome for e in status.epochs)
    held = [f"{o.region} by {o.owner}" for o in status.overrides]
    summary: Summary = [
        ("Epochs run", status.epoch),
        ("Epochs kept", f"{len(status.epochs)} ({_counts(outcomes)})"),
        ("Max utilization now", percent(max(status.utilization.values(), default=None))),
        ("Target utilization", percent(report.target_utilization)),
        ("Routing version", status.last_good_version),
        ("Overrides held", held or "none"),
        ("Paused by", status.paused_by or "not paused"),
    ]
    regions = sorted(set(status.shares) | set(status.utilization) | set(status.capacity_shares))
    overrides = {o.region: o for o in status.overrides}
    current = table(
        ["region", "share", "utilization", "capacity share", "override"],
        [
            [
                r,
                percent(status.shares.get(r)),
                percent(status.utilization.get(r)),
                percent(status.capacity_shares.get(r)),
                overrides[r].owner if r in overrides else "",
            ]
            for r in regions
        ],
    )
    epochs = table(
        ["epoch", "at", "outcome", "max util before", "after", "moved", "churn", "reason"],
        [
            [
                e.epoch,
                e.at,
                e.outcome + (" (urgent)" if e.urgent else ""),
                percent(e.max_utilization_before),
                percent(e.max_utilization_after),
                percent(e.traffic_moved_share),
                e.churn,
                e.reason,
            ]  # fmt: skip
            for e in reversed(status.epochs)
        ],
    )
    return summary, [
        _h2("Traffic"),
        rebalancer_shares_chart(report),
        rebalancer_utilization_chart(report),
        _h2("Current routing"),
        current,
        _h2("Epochs (newest first)"),
        epochs,
    ]


def load_test(report: LoadTestReport) -> tuple[Summary, list[str]]:
    result, progress = report.result, report.progress
    summary: Summary = [("Target", f"{report.region}/{report.service}")]
    if result is not None:
        est = result.estimate
        summary += [
            ("Outcome", f"{result.outcome}: {result.reason}"),
            ("Capacity found", f"{est.load:.1f} rps ({est.method})"),
            ("Theoretical capacity", f"{result.theoretical_capacity:.1f} rps"),
            ("Capacity ratio", percent(result.capacity_ratio)),
            ("Bottleneck metric", result.bottleneck or "none crossed its threshold"),
            ("Steps", result.steps),
            ("Highest load held", f"{result.load_reached:.1f} rps"),
            ("Unhealthy windows", result.windows_unhealthy),
            ("Routing restored", result.routing_restored),
            ("Restore took", seconds(result.restore_s)),
        ]
    elif progress is not None:
        summary += [
            ("Phase", progress.phase),
            ("Steps so far", progress.steps),
            ("Current load", progress.current_load),
            ("Current share", percent(progress.current_share)),
            ("Band", progress.band.name if progress.band is not None else None),
            ("Last decision", progress.last_reason),
            ("Theoretical capacity", progress.theoretical_capacity),
        ]
    steps = table(
        ["step", "at", "load asked", "pinned share", "load", "band", "decision", "readings"],
        [
            [
                s.index,
                s.at,
                s.target_load,
                percent(s.pin_share),
                s.load,
                s.band.name,
                f"{s.decision.action}: {s.decision.reason}" if s.decision else "",
                "; ".join(f"{r.metric}={fmt_value(r.value)} ({r.band.name})" for r in s.readings),
            ]
            for s in report.history
        ],  # fmt: skip
    )
    return summary, [
        _h2("Load-test curve"),
        load_test_curve_chart(report),
        load_steps_chart(report),
        _h2("Steps"),
        steps,
    ]


def fmt_value(value: float | None) -> str:
    return "missing" if value is None else f"{value:.4g}"


def _offset(at: datetime | None, origin: datetime | None) -> float | None:
    if at is None or origin is None:
        return None
    return (at - origin).total_seconds()


def runbook(report: RunbookReportView) -> tuple[Summary, list[str]]:
    origin = run_origin(report)
    phases = Counter(str(t.phase) for t in report.tasks)
    operator = [e for e in report.events if any(w in e.lower() for w in OPERATOR_WORDS)]
    summary: Summary = [
        ("Runbook", f"{report.runbook} ({report.mode} run)"),
        ("Outcome", report.outcome),
        ("Region", report.region),
        ("Tasks", f"{len(report.tasks)} ({_counts(phases)})"),
        ("Critical path", " -> ".join(report.critical_path) or "-"),
        ("Critical path length", seconds(report.critical_path_s)),
        ("Sum of task durations", seconds(report.sequential_s)),
        ("Overrides and approvals", len(operator)),
    ]
    critical = set(report.critical_path)
    ordered = sorted(report.tasks, key=lambda t: (t.started_at is None, t.started_at, t.id))
    tasks = table(
        ["task", "template", "phase", "start (s)", "duration", "expected", "critical",
         "overrides", "message"],
        [
            [t.id, t.template, str(t.phase), _offset(t.started_at, origin), seconds(t.duration_s),
             seconds(t.expected_s), t.id in critical, t.overrides, t.message]
            for t in ordered
        ],
        row_classes=["critical" if t.id in critical else "" for t in ordered],
    )  # fmt: skip
    body = [
        _h2("Task timeline"),
        runbook_gantt_chart(report),
        _h2("Tasks"),
        tasks,
        _h2("Gates (why tasks held or went on)"),
        *runbook_gate_charts(report),
        _h2("Overrides and approvals"),
        table(["event"], [[e] for e in operator]) if operator else "<p>none</p>",
        _h2("Traffic"),
        runbook_share_chart(report),
        *_training_of_run(report),
        _h2("Event log"),
        '<pre class="events">' + "\n".join(_escape_lines(report.events)) + "</pre>",
    ]
    return summary, body


def _training_of_run(report: RunbookReportView) -> list[str]:
    """The jobs the run moved or saw recovered: one time axis with the traffic, and what
    each lost (a run without training tasks shows nothing)."""
    if not report.training:
        return []
    origin = run_origin(report)
    start = report.header.start or origin
    end = report.header.end or report.as_of or start
    rows = []
    for job in report.training:
        status = job.status
        if start is None or end is None:
            continue
        for f in failures_during(status, start, end):
            rows.append([status.job, f"failure: {f.kind}", _offset(f.onset_at, origin),
                         seconds(f.mttr_s), f.lost_steps, f.detail])  # fmt: skip
        for m in moves_during(status, start, end):
            duration = (
                None if m.finished_at is None else (m.finished_at - m.requested_at).total_seconds()
            )
            rows.append([status.job, f"move: {m.result.outcome}", _offset(m.requested_at, origin),
                         seconds(duration), m.result.lost_steps, m.result.detail])  # fmt: skip
    states = ", ".join(f"{j.status.job} {j.status.state} at step {j.status.step}"
                       for j in report.training)  # fmt: skip
    return [
        _h2("Traffic and training, side by side"),
        incident_timeline_chart(report),
        f"<p>{escape(states)}</p>",
        table(["job", "what", "at (s)", "MTTR / duration", "steps lost", "detail"], rows),
    ]


def _escape_lines(lines: list[str]) -> list[str]:
    return [escape(line) for line in lines]


def training(report: TrainingReport) -> tuple[Summary, list[str]]:
    status = report.status
    failures = status.failures
    # Totals cover every failure; only the newest records are listed (older ones folded).
    totals = status.totals
    total = f" of {status.total_steps}" if status.total_steps else ""
    summary: Summary = [
        ("Job", status.job),
        ("State", status.state),
        ("Step (last known)", f"{status.step}{total}"),
        ("ETTR", percent(status.ettr)),
        ("Failures", totals.failures),
        ("Mean MTTD", seconds(totals.mttd_mean_s)),
        ("Mean MTTR", seconds(totals.mttr_mean_s)),
        ("Steps lost", totals.lost_steps),
        ("Alert", status.alert or "none"),
    ]
    origin = report.started_at or report.header.start
    rows = table(
        ["#", "kind", "onset (s)", "MTTD", "MTTR", "lost steps", "failed at", "resumed from",
         "quarantined", "detail"],
        [
            [f.number, str(f.kind), _offset(f.onset_at, origin), seconds(f.mttd_s),
             seconds(f.mttr_s), f.lost_steps, f.failed_at_step, f.resumed_from_step,
             f.quarantined, f.detail]
            for f in failures
        ],
    )  # fmt: skip
    return summary, [
        _h2("Progress"),
        training_steps_chart(report),
        _h2("Failures"),
        *(
            [f"<p>{status.dropped} older records folded into the totals</p>"]
            if status.dropped
            else []
        ),
        rows if failures else "<p>no failures</p>",
    ]

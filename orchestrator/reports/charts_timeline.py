"""Charts over wall time: a runbook's task Gantt and drained-region share, a training job's steps."""

from __future__ import annotations

from datetime import datetime

from orchestrator.contracts.runbook import TaskPhase
from orchestrator.reports.charts import CRITICAL, NORMAL, figure_html, new_figure, no_data
from orchestrator.reports.models import RunbookReportView, TrainingReport

__all__ = ["run_origin", "runbook_gantt_chart", "runbook_share_chart", "training_steps_chart"]

PHASE_COLORS = {
    TaskPhase.FAILED: "#7f7f7f",
    TaskPhase.ROLLED_BACK: "#bcbd22",
}


def _unit(span_s: float) -> tuple[float, str]:
    """Divisor and label of a readable time axis for a span."""
    if span_s > 3 * 3600:
        return 3600.0, "hours"
    if span_s > 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


def run_origin(report: RunbookReportView) -> datetime | None:
    starts = [t.started_at for t in report.tasks if t.started_at is not None]
    if report.header.start is not None:
        starts.append(report.header.start)
    return min(starts) if starts else None


def runbook_gantt_chart(report: RunbookReportView) -> str:
    """One bar per task that ran, from its start to its end; the critical path in red."""
    title = f"Task timeline of {report.runbook} (red: critical path)"
    origin = run_origin(report)
    ran = [t for t in report.tasks if t.started_at is not None]
    if origin is None or not ran:
        return no_data(title, "no task has started")
    ran.sort(key=lambda t: (t.started_at, t.id))
    ends = [t.finished_at for t in ran if t.finished_at is not None]
    known = [*ends, *(t.started_at for t in ran if t.started_at is not None)]
    as_of = report.header.end or report.as_of or max(known)
    span = max((as_of - origin).total_seconds(), 1e-3)
    div, unit = _unit(span)
    critical = set(report.critical_path)
    fig = new_figure(9.0, 1.2 + 0.45 * len(ran))
    ax = fig.add_subplot()
    labels = []
    for row, task in enumerate(ran):
        assert task.started_at is not None
        start = (task.started_at - origin).total_seconds() / div
        end_at = task.finished_at or as_of
        width = max((end_at - task.started_at).total_seconds() / div, span / div / 400)
        on_path = task.id in critical
        color = CRITICAL if on_path else PHASE_COLORS.get(task.phase, NORMAL)
        ax.barh(row, width, left=start, height=0.6, color=color,
                edgecolor="black" if on_path else color, lw=1.5 if on_path else 0.5,
                hatch=None if task.finished_at else "//")  # fmt: skip
        seconds = (end_at - task.started_at).total_seconds()
        note = f" {seconds:.1f}s" + ("" if task.phase is TaskPhase.DONE else f" {task.phase}")
        if task.overrides:
            note += " (override)"
        ax.text(start + width, row, note, va="center", fontsize="small")
        labels.append(("* " if on_path else "") + task.id)
    ax.set_yticks(range(len(ran)), labels)
    for tick, task in zip(ax.get_yticklabels(), ran, strict=True):
        if task.id in critical:
            tick.set_color(CRITICAL)
            tick.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlim(0, span / div * 1.18)
    ax.set_xlabel(f"{unit} since the run started (hatched: still running)")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="x")
    return figure_html(fig, title)


def runbook_share_chart(report: RunbookReportView) -> str:
    title = f"Traffic share of {report.region or 'the region'} during the run"
    origin = run_origin(report)
    if origin is None or not report.region_shares:
        return no_data(title, "no rebalancer epoch with shares falls inside this run")
    points = sorted(report.region_shares, key=lambda p: p.at)
    span = max((points[-1].at - origin).total_seconds(), 1e-3)
    div, unit = _unit(span)
    fig = new_figure(9.0, 3.2)
    ax = fig.add_subplot()
    xs = [(p.at - origin).total_seconds() / div for p in points]
    ax.step(xs, [p.share * 100 for p in points], where="post", color=NORMAL, marker="o", ms=3)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"{unit} since the run started (one point per rebalancer epoch)")
    ax.set_ylabel("share of demand (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return figure_html(fig, title)


def training_steps_chart(report: TrainingReport) -> str:
    """The job's step over time, known at each failure and recovery; downtime shaded."""
    title = f"Training job {report.status.job or '?'}: step over time"
    origin = report.started_at or report.header.start
    if origin is None:
        return no_data(title, "the supervisor has not started")
    failures = sorted(report.status.failures, key=lambda f: f.onset_at)
    last = max([report.as_of, *(f.recovered_at or f.detected_at for f in failures)])
    span = max((last - origin).total_seconds(), 1e-3)
    div, unit = _unit(span)

    def x(at: datetime) -> float:
        return (at - origin).total_seconds() / div

    fig = new_figure()
    ax = fig.add_subplot()
    # The supervisor learns the step when the watcher returns (a failure or the end), so the
    # curve is exact at those points and straight between them (a steady step rate).
    at, step = origin, report.start_step
    if report.launched_at is not None and report.launched_at > origin:
        # The supervisor launched the job: no steps until it ran.
        ax.plot([x(origin), x(report.launched_at)], [step, step], color="grey", ls="--", lw=1)
        at = report.launched_at
    for f in failures:
        ax.plot([x(at), x(f.onset_at)], [step, f.failed_at_step], color=NORMAL, lw=2)
        ax.plot(x(f.onset_at), f.failed_at_step, "X", color=CRITICAL, ms=10, zorder=3)
        ax.axvline(x(f.detected_at), color="#ff9f40", ls=":", lw=1)
        end = f.recovered_at or f.restarted_at
        ax.axvspan(x(f.onset_at), x(end or report.as_of), color=CRITICAL, alpha=0.12, lw=0)
        ax.annotate(f"#{f.number} {f.kind}", (x(f.onset_at), f.failed_at_step),
                    textcoords="offset points", xytext=(4, 6), fontsize="small")  # fmt: skip
        if end is None or f.resumed_from_step is None:
            at, step = f.onset_at, f.failed_at_step
            continue
        ax.plot([x(f.onset_at), x(end)], [f.failed_at_step, f.resumed_from_step],
                color="grey", ls="--", lw=1)  # fmt: skip
        ax.plot(x(end), f.resumed_from_step, "o", color="#2ca02c", ms=8, zorder=3)
        at, step = end, f.resumed_from_step
    if report.status.state == "finished":
        ax.plot([x(at), x(report.as_of)], [step, report.status.step], color=NORMAL, lw=2)
    elif report.status.state != "halted":
        ax.plot(x(at), step, "o", color=NORMAL)
        ax.text(x(at), step, "  running: the step is next known at a failure or the end",
                fontsize="small", va="bottom")  # fmt: skip
    if report.status.total_steps:
        ax.axhline(report.status.total_steps, color="black", ls=":", lw=1, label="total steps")
    ax.plot([], [], "X", color=CRITICAL, label="failure (onset)")
    ax.plot([], [], ":", color="#ff9f40", label="detected")
    ax.plot([], [], "o", color="#2ca02c", label="recovered (resumed step)")
    ax.set_xlabel(f"{unit} since supervision began (shaded: down)")
    ax.set_ylabel("step")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    return figure_html(fig, title)

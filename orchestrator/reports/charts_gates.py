"""Why a gated task held or went on: its gate readings over the run's wall time.

A task with gates records every reading of them (``TaskState.gates``): the p99 and error
rate of the regions the gates select (those receiving the drained traffic), each predicate's
observed value and threshold, and whether the task held at its step. The chart draws one
panel per metric, one line per region, the thresholds as dashed lines and each hold as a
shaded span (from the reading that held to the reread). The data is built apart from the
drawing so tests check it without pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.contracts.runbook import TaskState
from orchestrator.reports.charts import CRITICAL, figure_html, new_figure, no_data
from orchestrator.reports.charts_timeline import _unit, run_origin
from orchestrator.reports.models import RunbookReportView

__all__ = ["GateChart", "GatePanel", "gate_chart_data", "runbook_gate_charts"]

#: the metrics every gate reading carries for its regions, drawn first
REGION_METRICS = ("p99_ms", "error_rate")
LABELS = {
    "p99_ms": "p99 latency (ms)",
    "p50_ms": "p50 latency (ms)",
    "error_rate": "error rate (fraction)",
    "rps": "requests per second",
    "utilization": "utilization",
}


@dataclass
class GatePanel:
    metric: str
    #: region (or ``region/service``) -> (seconds since the run started, values; None: no data)
    lines: dict[str, tuple[list[float], list[float | None]]] = field(default_factory=dict)
    #: the gates' thresholds on this metric, each drawn once
    thresholds: list[float] = field(default_factory=list)

    def add(self, label: str, x: float, y: float | None) -> None:
        xs, ys = self.lines.setdefault(label, ([], []))
        xs.append(x)
        ys.append(y)


@dataclass
class GateChart:
    task: str
    panels: list[GatePanel]
    #: (start, end) in seconds since the run started: the task held at its step
    holds: list[tuple[float, float]]
    #: the step each reading followed, by its x
    steps: list[tuple[float, int]]


def gate_chart_data(task: TaskState, origin: datetime, as_of: datetime | None) -> GateChart:
    """The chart of ``task``'s gate readings, x in seconds since ``origin``."""
    panels: dict[str, GatePanel] = {m: GatePanel(m) for m in REGION_METRICS}
    readings = sorted(task.gates, key=lambda r: r.at)
    xs = [(r.at - origin).total_seconds() for r in readings]
    for x, reading in zip(xs, readings, strict=True):
        for region, health in sorted(reading.regions.items()):
            panels["p99_ms"].add(region, x, health.p99_ms)
            panels["error_rate"].add(region, x, health.error_rate)
        for check in reading.checks:
            if not check.metric:  # recorded before the predicate's parts were kept
                continue
            panel = panels.setdefault(check.metric, GatePanel(check.metric))
            if check.threshold is not None and check.threshold not in panel.thresholds:
                panel.thresholds.append(check.threshold)
            drawn = check.service is None and check.region in reading.regions
            if drawn and check.metric in REGION_METRICS:
                continue  # the region's line above is this value
            label = check.region if check.service is None else f"{check.region}/{check.service}"
            panel.add(label, x, check.observed)
    end = task.finished_at or as_of
    holds = []
    for i, reading in enumerate(readings):
        if not reading.held:
            continue
        if i + 1 < len(xs):
            until = xs[i + 1]
        elif end is not None:
            until = max((end - origin).total_seconds(), xs[i])
        else:
            until = xs[i]
        holds.append((xs[i], until))
    kept = [p for p in panels.values() if p.lines or p.thresholds]
    return GateChart(
        task=task.id,
        panels=kept,
        holds=holds,
        steps=[(x, r.step) for x, r in zip(xs, readings, strict=True)],
    )


def _gate_chart(chart: GateChart, title: str) -> str:
    last = max([*(x for x, _ in chart.steps), *(e for _, e in chart.holds), 1e-3])
    div, unit = _unit(last)
    fig = new_figure(9.0, 2.6 * len(chart.panels) + 0.6)
    axes = fig.subplots(len(chart.panels), 1, squeeze=False, sharex=True).flatten()
    for ax, panel in zip(axes, chart.panels, strict=True):
        for label, (xs, ys) in sorted(panel.lines.items()):
            points = [(x / div, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", ms=3,
                    label=label)  # fmt: skip
        for value in panel.thresholds:
            ax.axhline(value, color=CRITICAL, ls="--", lw=1.2)
        for start, end in chart.holds:
            ax.axvspan(start / div, max(end / div, start / div + last / div / 300),
                       color="#ff9f40", alpha=0.25, lw=0)  # fmt: skip
        ax.set_ylabel(LABELS.get(panel.metric, panel.metric), fontsize="small")
        ax.grid(alpha=0.3)
        if panel.lines:
            ax.legend(loc="upper right", fontsize="x-small")
    axes[0].plot([], [], ls="--", color=CRITICAL, label="gate threshold")
    axes[0].fill_between([], [], color="#ff9f40", alpha=0.25, label="held at its step")
    axes[0].legend(loc="upper right", fontsize="x-small")
    axes[-1].set_xlabel(f"{unit} since the run started (one point per gate reading)")
    fig.suptitle(title)
    return figure_html(fig, title)


def runbook_gate_charts(report: RunbookReportView) -> list[str]:
    """One chart per task that read its gates, in the order the tasks started."""
    origin = run_origin(report)
    gated = [t for t in report.tasks if t.gates]
    if origin is None or not gated:
        return [no_data("Gate readings", "no task has read its gates")]
    as_of = report.header.end or report.as_of
    gated.sort(key=lambda t: (t.started_at or origin, t.id))
    html = []
    for task in gated:
        title = f"Gates of {task.id}: p99 and error rate of the receiving regions"
        chart = gate_chart_data(task, origin, as_of)
        if not chart.panels:
            html.append(no_data(title, "its readings carry no values"))
            continue
        html.append(_gate_chart(chart, title))
    return html

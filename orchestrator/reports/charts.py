"""Charts of the rebalancer and the load test, as embedded PNG figures.

Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot, no
display, no global state) and embedded as base64 ``data:`` URLs, so a report is
one self-contained file. A chart without data says so in one line instead.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from html import escape

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from orchestrator.policy.health_metrics import Band, HealthMetric
from orchestrator.reports.models import LoadTestReport, RebalancerReport

__all__ = [
    "BAND_COLORS",
    "CRITICAL",
    "CurvePanel",
    "figure_html",
    "load_curve_data",
    "load_steps_chart",
    "load_test_curve_chart",
    "no_data",
    "new_figure",
    "rebalancer_shares_chart",
    "rebalancer_utilization_chart",
]

#: healthiest to worst, as in Kraken's band pictures
BAND_COLORS = {
    Band.BOLD: "#2ca02c",
    Band.MODERATE: "#98df8a",
    Band.CAUTIOUS: "#ffdd57",
    Band.NOMORE: "#ff9f40",
    Band.BACKOFF: "#d62728",
}
CRITICAL = "#d62728"
NORMAL = "#4c78a8"


def new_figure(width: float = 9.0, height: float = 4.0) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def figure_html(fig: Figure, title: str) -> str:
    """The figure as an ``<img>`` with a base64 PNG, captioned with ``title``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    t = escape(title)
    return (
        f'<figure class="chart"><img alt="{t}" src="data:image/png;base64,{data}">'
        f"<figcaption>{t}</figcaption></figure>"
    )


def no_data(title: str, why: str) -> str:
    return f'<p class="nodata"><strong>{escape(title)}</strong>: {escape(why)}</p>'


# --- rebalancer ------------------------------------------------------------------------


def _per_epoch(report: RebalancerReport, field: str) -> dict[str, tuple[list[int], list[float]]]:
    """region -> (epochs, values) of ``shares`` or ``utilization`` over the kept epochs."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for record in report.status.epochs:
        for region, value in sorted(getattr(record, field).items()):
            xs, ys = series.setdefault(region, ([], []))
            xs.append(record.epoch)
            ys.append(value)
    return series


def rebalancer_shares_chart(report: RebalancerReport) -> str:
    title = "Traffic share per region, per epoch"
    series = _per_epoch(report, "shares")
    if not series:
        return no_data(title, "no epoch in the kept history recorded shares")
    fig = new_figure()
    ax = fig.add_subplot()
    for region, (xs, ys) in series.items():
        (line,) = ax.plot(xs, [y * 100 for y in ys], marker="o", ms=3, label=region)
        fair = report.status.capacity_shares.get(region)
        if fair is not None:
            ax.axhline(fair * 100, color=line.get_color(), ls=":", lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("share of demand (%)")
    ax.set_title(title + " (dotted: capacity share)")
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    return figure_html(fig, title)


def rebalancer_utilization_chart(report: RebalancerReport) -> str:
    title = "Utilization per region, per epoch"
    series = _per_epoch(report, "utilization")
    if not series:
        return no_data(title, "no epoch in the kept history recorded utilization")
    fig = new_figure()
    ax = fig.add_subplot()
    for region, (xs, ys) in series.items():
        ax.plot(xs, [y * 100 for y in ys], marker="o", ms=3, label=region)
    if report.target_utilization is not None:
        ax.axhline(report.target_utilization * 100, color="black", ls="--", lw=1.2, label="target")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("predicted utilization (%)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    return figure_html(fig, title)


# --- load test -------------------------------------------------------------------------


def _shade_bands(ax: Axes, metric: HealthMetric) -> None:
    edges = list(metric.boundaries())
    if metric.better == "higher":
        # Healthy is high: BOLD is above the first edge, BACKOFF below the last.
        spans = [(edges[0], None), *zip(edges[1:], edges[:-1], strict=True), (None, edges[3])]
    else:
        spans = [(None, edges[0]), *zip(edges[:-1], edges[1:], strict=True), (edges[3], None)]
    low, high = ax.get_ylim()
    for band, (start, end) in zip(Band, spans, strict=True):
        ax.axhspan(
            low if start is None else start,
            high if end is None else end,
            color=BAND_COLORS[band],
            alpha=0.18,
            lw=0,
        )
    ax.set_ylim(low, high)


def _capacity_lines(ax: Axes, report: LoadTestReport) -> None:
    result = report.result
    if result is None:
        return
    ax.axvline(result.estimate.load, color=CRITICAL, lw=1.5, label="capacity found")
    ax.axvline(result.theoretical_capacity, color="grey", ls=":", lw=1.2, label="theoretical")


@dataclass
class CurvePanel:
    """One watched metric against the load: what a panel of the load-test curve draws."""

    metric: str
    #: (load, value, band) per step that read the metric
    points: list[tuple[float, float, Band]] = field(default_factory=list)
    #: the value where the metric enters NOMORE (None: neither read nor defined)
    nomore: float | None = None
    #: the four band edges, BOLD to BACKOFF, when the metric's definition is known
    edges: tuple[float, float, float, float] | None = None
    better: str = "lower"
    bottleneck: bool = False


def load_curve_data(report: LoadTestReport) -> list[CurvePanel]:
    """A panel per watched metric (defined, or read at a step), by name."""
    panels: dict[str, CurvePanel] = {}
    for m in report.metrics:
        panels[m.name] = CurvePanel(m.name, nomore=m.nomore_threshold, edges=m.boundaries(),
                                    better=m.better)  # fmt: skip
    for step in report.history:
        for reading in step.readings:
            panel = panels.setdefault(reading.metric, CurvePanel(reading.metric))
            if panel.nomore is None:
                panel.nomore, panel.better = reading.nomore_threshold, reading.better
            if reading.value is not None:
                panel.points.append((step.load, reading.value, reading.band))
    bottleneck = report.result.bottleneck if report.result is not None else None
    for panel in panels.values():
        panel.bottleneck = panel.metric == bottleneck
    return [panels[name] for name in sorted(panels)]


def load_test_curve_chart(report: LoadTestReport) -> str:
    """One panel per watched metric: its value against the load, band-shaded, capacity marked."""
    title = f"Load-test curve: health metrics of {report.region}/{report.service} against load"
    panels = load_curve_data(report)
    if not any(p.points for p in panels):
        return no_data(title, "no step has a metric reading yet")
    definitions = {m.name: m for m in report.metrics}
    cols = min(len(panels), 3)
    rows = -(-len(panels) // cols)
    fig = new_figure(4.2 * cols, 3.4 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).flatten()
    for ax, panel in zip(axes, panels, strict=False):
        loads = [p[0] for p in panel.points]
        values = [p[1] for p in panel.points]
        ax.plot(loads, values, color="#555555", lw=1, zorder=2)
        ax.scatter(loads, values, c=[BAND_COLORS[p[2]] for p in panel.points],
                   edgecolors="black", s=28, zorder=3)  # fmt: skip
        marks = [*values, *(panel.edges or ())]
        if panel.nomore is not None:
            ax.axhline(panel.nomore, color=BAND_COLORS[Band.NOMORE], ls="--", lw=1.2,
                       label="NOMORE")  # fmt: skip
            marks.append(panel.nomore)
        top = max([*marks, 0.0])
        ax.set_ylim(min([*marks, 0.0]), top * 1.15 if top > 0 else 1.0)
        if panel.metric in definitions:
            _shade_bands(ax, definitions[panel.metric])
        if not panel.points:
            ax.text(0.5, 0.5, "no reading", transform=ax.transAxes, ha="center")
        _capacity_lines(ax, report)
        marked = " (bottleneck)" if panel.bottleneck else ""
        ax.set_title(panel.metric + marked, fontsize="medium",
                     color=CRITICAL if marked else "black")  # fmt: skip
        ax.set_xlabel("load (rps)")
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    axes[0].legend(loc="upper left", fontsize="x-small")
    fig.suptitle(title)
    return figure_html(fig, title)


def load_steps_chart(report: LoadTestReport) -> str:
    """The load held at each step, coloured by its governing band, with the target asked."""
    title = f"Load per step on {report.region}/{report.service}"
    history = report.history
    if not history:
        return no_data(title, "the test has not observed a window yet")
    fig = new_figure()
    ax = fig.add_subplot()
    xs = [s.index for s in history]
    ax.bar(xs, [s.load for s in history], color=[BAND_COLORS[s.band] for s in history],
           edgecolor="black", lw=0.5, label="load measured (colour: band)")  # fmt: skip
    targets = [(s.index, s.target_load) for s in history if s.target_load is not None]
    if targets:
        ax.plot([t[0] for t in targets], [t[1] for t in targets], "k_", ms=18, mew=2,
                label="load asked")  # fmt: skip
    if report.result is not None:
        ax.axhline(report.result.estimate.load, color=CRITICAL, lw=1.5, label="capacity found")
        ax.axhline(report.result.theoretical_capacity, color="grey", ls=":", label="theoretical")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step (0: baseline)")
    ax.set_ylabel("load (rps)")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3, axis="y")
    return figure_html(fig, title)

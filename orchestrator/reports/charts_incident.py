"""One incident, one time axis: a runbook run's traffic and the training jobs it moved.

The top panel is the region's share of demand per rebalancer epoch; below it, one row
per job: its failures (onset to recovery, red) and planned moves (request to restart,
blue), each labelled with the steps it lost. Times are seconds from the run's start, so
a power loss that came before the alert started the run sits left of zero.
"""

from __future__ import annotations

from datetime import datetime

from matplotlib.patches import Patch

from orchestrator.reports.charts import CRITICAL, NORMAL, figure_html, new_figure, no_data
from orchestrator.reports.charts_timeline import run_origin
from orchestrator.reports.models import RunbookReportView, failures_during, moves_during

__all__ = ["incident_timeline_chart"]

MOVE = "#1f77b4"


def incident_timeline_chart(report: RunbookReportView) -> str:
    title = "Traffic and training on one time axis"
    origin = run_origin(report)
    if origin is None or not report.training:
        return no_data(title, "the run moved no training job and saw none recover")

    def x(at: datetime) -> float:
        return (at - origin).total_seconds()

    fig = new_figure(9.0, 2.4 + 0.6 * len(report.training))
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1 + len(report.training)])
    shares = sorted(report.region_shares, key=lambda p: p.at)
    if shares:
        top.step([x(p.at) for p in shares], [p.share * 100 for p in shares], where="post",
                 color=NORMAL, marker="o", ms=3)  # fmt: skip
        top.set_ylim(bottom=0)
    else:
        top.text(0.5, 0.5, "no rebalancer epoch with shares in the run", ha="center",
                 transform=top.transAxes)  # fmt: skip
    top.set_ylabel(f"{report.region or 'region'}\nshare (%)")
    top.grid(alpha=0.3)
    end = report.header.end or report.as_of or origin
    labels = []
    seen = [0.0, x(end)]
    for row, job in enumerate(report.training):
        status = job.status
        labels.append(status.job)
        for f in failures_during(status, origin, end):
            seen.append(x(f.onset_at))
            stop = f.recovered_at or end
            bottom.barh(row, x(stop) - x(f.onset_at), left=x(f.onset_at), color=CRITICAL,
                        alpha=0.7, height=0.5)  # fmt: skip
            bottom.annotate(f"{f.kind}: {f.lost_steps if f.lost_steps is not None else '?'} "
                            "steps lost", (x(f.onset_at), row + 0.3), fontsize="small")  # fmt: skip
        for m in moves_during(status, origin, end):
            bottom.barh(row, max(x(m.finished_at or end) - x(m.requested_at), 0.2),
                        left=x(m.requested_at), color=MOVE, alpha=0.7, height=0.5)  # fmt: skip
            lost = m.result.lost_steps
            bottom.annotate(f"move {m.result.outcome}: {lost if lost is not None else 0} lost",
                            (x(m.requested_at), row - 0.45), fontsize="small")  # fmt: skip
    bottom.set_yticks(range(len(labels)), labels)
    bottom.set_ylim(-0.8, len(labels) - 0.2)
    bottom.axvline(0, color="black", lw=1, ls=":")
    bottom.axvline(x(end), color="black", lw=1, ls=":")
    bottom.set_xlabel("seconds since the run started (dotted: the run's start and end)")
    margin = 0.05 * (max(seen) - min(seen) or 1.0)
    bottom.set_xlim(min(seen) - margin, max(seen) + margin)
    bottom.legend(
        handles=[
            Patch(color=CRITICAL, alpha=0.7, label="failure: onset to recovered"),
            Patch(color=MOVE, alpha=0.7, label="planned move"),
        ],
        loc="lower right",
        fontsize="small",
    )
    bottom.grid(alpha=0.3, axis="x")
    top.set_title(title)
    return figure_html(fig, title)

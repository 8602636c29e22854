"""HTML reports of one run of the orchestrator's workflows (``orchestrator report``).

``gather`` reads a run from Temporal into the models of ``models``; ``charts`` and
``charts_timeline`` draw them; ``render`` and ``sections`` make the page.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from orchestrator.reports.gather import gather_report, latest_workflow_id
from orchestrator.reports.models import Report
from orchestrator.reports.sections import render_report

__all__ = ["gather_report", "latest_workflow_id", "render_report", "write_html", "write_report"]


async def write_report(client: Client, workflow_id: str, out: Path) -> Path:
    """Write the HTML report of ``workflow_id`` to ``out`` and return its path."""
    report = await gather_report(client, workflow_id)
    # Drawing takes CPU for a moment: off the event loop, so a worker sharing it keeps polling
    # (the figures use matplotlib's object API on Agg, no pyplot state, so a thread is safe).
    return await asyncio.to_thread(write_html, report, out)


def write_html(report: Report, out: Path) -> Path:
    """Render ``report`` into the file ``out`` (its folder is created)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(report), encoding="utf-8")
    return out

"""The HTML page: header, summary table, charts and detail tables, in one self-contained file."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from typing import Any

from orchestrator.reports.models import RunHeader

__all__ = ["fmt", "key_values", "page", "percent", "seconds", "table"]

STYLE = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1000px; color: #222; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f3f7; } table.kv th { width: 14em; }
tr.critical td { background: #fde8e8; font-weight: 600; }
figure.chart { margin: 1em 0; } figure.chart img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: .85em; color: #555; } p.nodata { color: #8a6d3b; background: #fcf8e3;
padding: .5em; } .status-completed { color: #2ca02c; } .status-failed, .status-terminated,
.status-timed_out, .status-canceled { color: #d62728; } .status-running { color: #1f77b4; }
pre.events { background: #f7f7f7; padding: .6em; font-size: .8em; white-space: pre-wrap; }
"""


def fmt(value: Any) -> str:
    """A table cell's text: numbers rounded, times in UTC, nothing shown as a dash."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    if isinstance(value, list | tuple):
        return ", ".join(fmt(v) for v in value) or "-"
    return str(value)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    row_classes: Sequence[str] | None = None,
    cls: str = "",
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        klass = row_classes[i] if row_classes and row_classes[i] else ""
        attr = f' class="{klass}"' if klass else ""
        body.append(f"<tr{attr}>" + "".join(f"<td>{escape(fmt(c))}</td>" for c in row) + "</tr>")
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def key_values(rows: Iterable[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(fmt(v))}</td></tr>" for k, v in rows)
    return f'<table class="kv"><tbody>{body}</tbody></table>'


def header_html(header: RunHeader) -> str:
    status = escape(header.status)
    source = "workflow result" if header.source == "result" else "query of the running workflow"
    rows = [
        ("Workflow id", header.workflow_id),
        ("Run id", header.run_id),
        ("Type", header.workflow_type),
        ("Status", header.status),
        ("Started", header.start),
        ("Ended", header.end if header.end else "still running"),
        ("Duration", seconds(header.duration_s)),
        ("Data from", source),
    ]
    kv = key_values(rows).replace(
        f"<td>{status}</td>", f'<td class="status-{status}">{status}</td>', 1
    )
    return f"<h1>{escape(header.workflow_type)}: {escape(header.workflow_id)}</h1>{kv}"


def page(header: RunHeader, summary: list[tuple[str, Any]], sections: list[str]) -> str:
    title = escape(f"Report: {header.workflow_id} ({header.workflow_type})")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{STYLE}</style></head><body>"
        + header_html(header)
        + "<h2>Summary</h2>"
        + key_values(summary)
        + "".join(sections)
        + "</body></html>\n"
    )

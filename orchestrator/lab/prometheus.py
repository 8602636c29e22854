"""Health in the Prometheus text format, so a real Prometheus can scrape the lab.

The numbers are the ones ``GET /v1/health`` returns for the default window; a
series with no samples is left out (Prometheus' way of saying "no data"),
never written as zero.
"""

from __future__ import annotations

from orchestrator.models import HealthReport, Metrics

__all__ = ["render_metrics"]

_FIELDS = (
    ("rps", "requests per second over the window"),
    ("utilization", "busy slot-time over capacity"),
    ("p50_ms", "median latency, ms"),
    ("p99_ms", "99th percentile latency, ms"),
    ("error_rate", "share of requests that failed"),
    ("samples", "requests in the window"),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())


def render_metrics(report: HealthReport, extra: dict[str, dict[str, float]] | None = None) -> str:
    """``extra``: metric name -> label string -> value, for lab-only gauges."""
    lines: list[str] = []
    scopes: list[tuple[str, list[tuple[dict[str, str], Metrics]]]] = [
        ("region", [({"region": r.region}, r) for r in report.regions]),
        ("service", [({"region": s.region, "service": s.service}, s) for s in report.services]),
        ("pop", [({"pop": p.pop}, p) for p in report.pops]),
    ]
    for scope, entries in scopes:
        for field, help_text in _FIELDS:
            name = f"lab_{scope}_{field}"
            lines.append(f"# HELP {name} {help_text} (window {report.window_s:g}s)")
            lines.append(f"# TYPE {name} gauge")
            for labels, metrics in entries:
                value = getattr(metrics, field)
                if value is None or (field != "samples" and metrics.samples == 0):
                    continue
                lines.append(f"{name}{{{_labels(labels)}}} {float(value):.6g}")
    for name, series in (extra or {}).items():
        lines.append(f"# TYPE {name} gauge")
        for label_text, value in series.items():
            lines.append(
                f"{name}{{{label_text}}} {value:.6g}" if label_text else f"{name} {value:.6g}"
            )
    return "\n".join(lines) + "\n"

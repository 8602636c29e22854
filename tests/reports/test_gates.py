"""The charts that say why: a gated task's readings over time, and each metric against load.

Checked on the data each chart is drawn from (series, thresholds, hold spans, bands), built
from hand-made models, and on the rendered page: one embedded chart per gated task.
"""

from __future__ import annotations

from orchestrator.contracts.runbook import MAX_GATE_READINGS, record_gate
from orchestrator.policy.health_metrics import Band
from orchestrator.reports import render_report
from orchestrator.reports.charts import load_curve_data
from orchestrator.reports.charts_gates import gate_chart_data
from orchestrator.runbook.predicates import Predicate, PredicateResult, RegionReading
from tests.reports import samples
from tests.reports.test_render import charts, rendered

GATE_TITLE = "Gates of shift-traffic: p99 and error rate of the receiving regions"


class TestGateChart:
    """Per gated task: one line per receiving region for p99 and error rate, the gates'
    thresholds, and a span from each reading that held to the reread."""

    def test_series_thresholds_and_holds(self) -> None:
        report = samples.runbook()
        task = report.tasks[0]
        chart = gate_chart_data(task, samples.T0, report.header.end)
        assert [p.metric for p in chart.panels] == ["p99_ms", "error_rate"]
        p99, errors = chart.panels
        assert sorted(p99.lines) == sorted(errors.lines) == ["us-east", "us-west"]
        seconds = [float(s) for s in samples.GATE_READS]
        assert p99.lines["us-east"] == (seconds, [v[1] for v in samples.GATE_READS.values()])
        assert errors.lines["us-east"][1] == [v[2] for v in samples.GATE_READS.values()]
        assert p99.thresholds == [250.0] and errors.thresholds == [0.05]
        # us-east failed at 6 s and 9 s: the task held until each reread.
        assert chart.holds == [(6.0, 9.0), (9.0, 12.0)]
        assert [s for _, s in chart.steps] == [1, 2, 2, 2, 3, 4]

    def test_a_hold_on_the_last_reading_lasts_until_the_task_ended(self) -> None:
        report = samples.runbook()
        task = report.tasks[0]
        task.gates[-1].held = True
        chart = gate_chart_data(task, samples.T0, report.header.end)
        assert chart.holds[-1] == (18.0, 20.0)  # the task finished at 20 s

    def test_a_service_gate_on_another_metric_gets_its_own_panel(self) -> None:
        readings = samples.gate_readings()
        result = PredicateResult(
            predicate="rps of web in us-east <= 500", ok=True, message="holds",
            observations=[{"region": "us-east", "value": 420.0, "ok": True}],
            metric="rps", service="web", op="<=", threshold=500.0,
        )  # fmt: skip
        record_gate(readings, at=samples.at(19), step=4, results=[result],
                    regions={"us-east": RegionReading(p99_ms=140.0, error_rate=0.001)},
                    held=False)  # fmt: skip
        task = samples.task("t", 1, 20, gates=readings)
        rps = gate_chart_data(task, samples.T0, None).panels[-1]
        assert rps.metric == "rps"
        assert rps.lines == {"us-east/web": ([19.0], [420.0])}
        assert rps.thresholds == [500.0]

    def test_readings_from_before_the_parts_were_kept_still_draw_regions(self) -> None:
        # An old check result: no metric or threshold on the predicate, no region readings.
        old = PredicateResult(predicate="error_rate in us-east < 0.05", ok=False,
                              observations=[{"region": "us-east", "value": 0.3, "ok": False}],
                              message="fails")  # fmt: skip
        readings: list = []
        record_gate(readings, at=samples.at(5), step=1, results=[old], regions={}, held=True)
        task = samples.task("t", 1, 20, gates=readings)
        chart = gate_chart_data(task, samples.T0, None)
        assert chart.panels == [] and chart.holds == [(5.0, 20.0)]
        report = samples.runbook()
        report.tasks = [task]
        html = render_report(report)
        assert "its readings carry no values" in html

    def test_one_chart_per_gated_task_in_the_page(self) -> None:
        report = samples.runbook()
        report.tasks[2].gates = samples.gate_readings()
        html, found = rendered(report)
        assert GATE_TITLE in found
        assert "Gates of move-kv: p99 and error rate of the receiving regions" in found
        assert html.index(GATE_TITLE) < html.index("Gates of move-kv")  # in start order
        assert len(charts(html)) == 4

    def test_readings_are_bounded(self) -> None:
        predicate = Predicate.model_validate("error_rate in us-east < 0.05")
        readings: list = []
        for i in range(MAX_GATE_READINGS + 30):
            result = PredicateResult(predicate=predicate.describe(), ok=True, message="holds",
                                     metric="error_rate", op="<", threshold=0.05)  # fmt: skip
            record_gate(readings, at=samples.at(i), step=i, results=[result], regions={},
                        held=False)  # fmt: skip
        assert len(readings) == MAX_GATE_READINGS
        assert readings[0].step == 30 and readings[-1].step == MAX_GATE_READINGS + 29


class TestLoadCurve:
    """Each watched metric against the load, with its four band edges and NOMORE line."""

    def test_a_panel_per_watched_metric_with_its_bands(self) -> None:
        report = samples.load_test()
        panels = load_curve_data(report)
        assert [p.metric for p in panels] == sorted(m.name for m in report.metrics)
        for panel, metric in zip(panels, sorted(report.metrics, key=lambda m: m.name),
                                 strict=True):  # fmt: skip
            assert panel.edges == metric.boundaries()
            assert panel.nomore == metric.nomore_threshold
            assert [p[0] for p in panel.points] == [s.load for s in report.history]
        bottleneck = [p.metric for p in panels if p.bottleneck]
        assert bottleneck == ["eu-west/web:utilization"]
        utilization = panels[-1]
        assert utilization.points[-1] == (68.0, 68.0 / 75.0, Band.NOMORE)

    def test_a_watched_metric_without_readings_still_has_its_panel(self) -> None:
        report = samples.load_test()
        assert report.result is not None
        for step in report.result.history:
            step.readings = [r for r in step.readings if r.key != "error_rate"]
        panels = {p.metric: p for p in load_curve_data(report)}
        assert len(panels) == 3
        assert panels["eu-west/web:error_rate"].points == []
        assert panels["eu-west/web:error_rate"].edges is not None
        _, found = rendered(report)
        assert "Load-test curve: health metrics of eu-west/web against load" in found

"""Rendering a report from its model: one self-contained page with the charts each type needs."""

from __future__ import annotations

import base64
import re

from orchestrator.contracts.load_test import LoadTestProgress
from orchestrator.contracts.runbook import TaskPhase
from orchestrator.reports import render_report
from orchestrator.reports.models import Report
from tests.reports import samples

IMG = re.compile(r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


def charts(html: str) -> dict[str, bytes]:
    """Chart title -> PNG bytes of every embedded chart."""
    return {title: base64.b64decode(data) for title, data in IMG.findall(html)}


def assert_self_contained(html: str) -> None:
    assert html.startswith("<!DOCTYPE html>")
    # Nothing is fetched: no external URL in a src, href or CSS url().
    assert not re.search(r'(src|href)="(?!data:)', html)
    assert "url(" not in html and "http://" not in html and "https://" not in html


def summary_value(html: str, label: str) -> str:
    match = re.search(rf"<tr><th>{re.escape(label)}</th><td[^>]*>([^<]*)</td></tr>", html)
    assert match, f"no summary row {label!r}"
    return match.group(1)


def rendered(report: Report) -> tuple[str, dict[str, bytes]]:
    html = render_report(report)
    assert_self_contained(html)
    found = charts(html)
    assert html.count("<img") == len(found)
    for png in found.values():
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
    return html, found


class TestHeader:
    """Every report starts with the run's id, type, status, start, end and duration."""

    def test_header_of_a_finished_and_a_running_run(self) -> None:
        html, _ = rendered(samples.runbook())
        assert summary_value(html, "Workflow id") == "region-drain-eu-west"
        assert summary_value(html, "Type") == "RunbookWorkflow"
        assert summary_value(html, "Status") == "completed"
        assert summary_value(html, "Duration") == "46.0 s"
        assert summary_value(html, "Started") == "2026-12-03 12:00:00.000 UTC"
        running, _ = rendered(samples.rebalancer())
        assert summary_value(running, "Ended") == "still running"
        assert summary_value(running, "Data from") == "query of the running workflow"


class TestRebalancer:
    """The rebalancer's page charts share and utilization per region per epoch, with the target."""

    def test_two_charts_and_the_target(self) -> None:
        html, found = rendered(samples.rebalancer())
        assert set(found) == {
            "Traffic share per region, per epoch",
            "Utilization per region, per epoch",
        }
        assert summary_value(html, "Target utilization") == "75.0%"
        assert summary_value(html, "Overrides held") == "eu-west by runbook:eu-west"
        assert "health data missing for eu-west" in html  # the skipped epoch is listed

    def test_no_epochs_says_so_instead_of_an_empty_chart(self) -> None:
        report = samples.rebalancer()
        report.status.epochs = []
        html, found = rendered(report)
        assert found == {}
        assert html.count('class="nodata"') == 2


class TestLoadTest:
    """The load test's page draws each metric against load with its bands and the capacity."""

    def test_curve_steps_capacity_and_bottleneck(self) -> None:
        report = samples.load_test()
        html, found = rendered(report)
        assert set(found) == {
            "Load-test curve: health metrics of eu-west/web against load",
            "Load per step on eu-west/web",
        }
        assert summary_value(html, "Capacity found") == "67.5 rps (interpolated)"
        assert summary_value(html, "Bottleneck metric") == "eu-west/web:utilization"
        assert summary_value(html, "Capacity ratio") == "90.0%"
        # Every step is in the table, with the band it was judged in.
        assert html.count("<td>NOMORE</td>") == 1
        assert len(re.findall(r"<tr><td>\d+</td>", html)) == len(report.history)

    def test_a_running_test_shows_its_progress(self) -> None:
        report = samples.load_test()
        assert report.result is not None
        report.progress = LoadTestProgress(
            workflow_id="loadtest-eu-west", region="eu-west", service="web", phase="stepping",
            steps=2, history=report.result.history[:3],
        )  # fmt: skip
        report.result = None
        html, found = rendered(report)
        assert len(found) == 2
        assert summary_value(html, "Phase") == "stepping"
        assert "Capacity found" not in html


class TestRunbook:
    """The runbook's page has the task Gantt with the critical path marked, per-task durations,
    the operator's overrides and approvals, and the drained region's share."""

    def test_gantt_critical_path_and_share(self) -> None:
        report = samples.runbook()
        html, found = rendered(report)
        assert set(found) == {
            "Task timeline of region-drain (red: critical path)",
            "Traffic share of eu-west during the run",
            "Gates of shift-traffic: p99 and error rate of the receiving regions",
        }
        critical_rows = re.findall(r'<tr class="critical"><td>([^<]+)</td>', html)
        assert critical_rows == report.critical_path
        assert summary_value(html, "Critical path") == (
            "shift-traffic -&gt; move-kv -&gt; stop-batch -&gt; sign-off"
        )
        assert summary_value(html, "Overrides and approvals") == "2"
        assert "<td>15.0 s</td>" in html  # move-kv's duration

    def test_a_running_run_draws_running_tasks_up_to_now(self) -> None:
        report = samples.runbook()
        report.header = samples.header("RunbookWorkflow", "region-drain-eu-west", None)
        move_kv = next(t for t in report.tasks if t.id == "move-kv")
        move_kv.finished_at, move_kv.phase = None, TaskPhase.RUNNING
        report.as_of = samples.at(30)
        html, found = rendered(report)
        assert len(found) == 3
        assert summary_value(html, "Ended") == "still running"
        assert "<td>running</td>" in html

    def test_nothing_started_yet(self) -> None:
        report = samples.runbook()
        for t in report.tasks:
            t.started_at = t.finished_at = None
            t.phase = TaskPhase.PENDING
            t.gates = []
        report.region_shares = []
        html, found = rendered(report)
        assert found == {}
        assert "no task has started" in html
        assert "no task has read its gates" in html


class TestTraining:
    """The training page charts the step over time with failures and recoveries, and lists
    each failure's MTTD, MTTR and lost steps, with ETTR in the summary."""

    def test_steps_failures_and_ettr(self) -> None:
        html, found = rendered(samples.training())
        assert list(found) == ["Training job llm: step over time"]
        assert summary_value(html, "ETTR") == "71.0%"
        assert summary_value(html, "Steps lost") == "70"
        assert summary_value(html, "Mean MTTR") == "9.0 s"
        rows = re.findall(r"<tr><td>(\d)</td><td>(\w[\w-]*)</td><td>[^<]*</td><td>([^<]*)</td>"
                          r"<td>([^<]*)</td><td>([^<]*)</td>", html)  # fmt: skip
        assert rows == [("1", "gpu", "1.0 s", "7.0 s", "50"), ("2", "building", "1.5 s",
                                                                "11.0 s", "20")]  # fmt: skip

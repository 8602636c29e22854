"""End to end: a real Alertmanager delivers to the trigger server, which starts runs on Temporal."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from orchestrator.contracts.runbook import AlertResolvedInput, RunbookReport, RunbookStatus
from orchestrator.triggers.starter import RunInfo, StartRequest, StartResult, TemporalRunStarter
from tests.triggers.conftest import TemporalStack, finish, make_app
from tests.triggers.payloads import TOKEN, runbook
from tests.triggers.servers import alertmanager, alertmanager_config, serve_app
from tests.triggers.test_temporal_intake import wait_visible


@dataclass
class CountingStarter:
    """The Temporal starter, recording what each delivery asked for."""

    inner: TemporalRunStarter
    starts: list[StartResult] = field(default_factory=list)
    signalled: list[str | None] = field(default_factory=list)

    async def start(self, request: StartRequest) -> StartResult:
        result = await self.inner.start(request)
        self.starts.append(result)
        return result

    async def signal_resolved(self, workflow_id: str, signal: AlertResolvedInput) -> str | None:
        run_id = await self.inner.signal_resolved(workflow_id, signal)
        self.signalled.append(run_id)
        return run_id

    async def find_run(self, workflow_id: str) -> RunInfo | None:
        return await self.inner.find_run(workflow_id)

    async def last_start(
        self, runbook: str, parameters: Mapping[str, Any], region: str | None, since: datetime
    ) -> datetime | None:
        return await self.inner.last_start(runbook, parameters, region, since)


async def _until(predicate: Any, timeout_s: float, what: str) -> None:
    for _ in range(int(timeout_s / 0.1)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class TestRealAlertmanager:
    """One alert starts exactly one run, repeats start none, and resolution reaches the run."""

    async def test_alert_to_run_to_resolution(
        self, temporal_stack: TemporalStack, unique: str, tmp_path: Path
    ) -> None:
        name = f"drain-{unique}"
        starter = CountingStarter(temporal_stack.starter)
        app = make_app([runbook(name)], starter)
        labels = {"alertname": "RegionErrorRate", "severity": "critical", "region": "eu-west"}
        now = datetime.now(UTC)
        firing = [
            {"labels": labels, "annotations": {"summary": "errors"}, "startsAt": now.isoformat()}
        ]
        async with (
            serve_app(app) as base,
            alertmanager(
                tmp_path, alertmanager_config(f"{base}/v1/alerts/alertmanager", TOKEN)
            ) as am,
            httpx.AsyncClient(base_url=am, timeout=5.0) as http,
        ):
            assert (await http.post("/api/v2/alerts", json=firing)).status_code == 200
            await _until(lambda: len(starter.starts) >= 1, 15, "the first delivery")
            first = starter.starts[0]
            assert first.started

            # The same alert again, and Alertmanager's own repeats (repeat_interval 2s).
            assert (await http.post("/api/v2/alerts", json=firing)).status_code == 200
            await _until(lambda: _alerts(app, "deduplicated") >= 2, 15, "repeated deliveries")
            assert [s.started for s in starter.starts].count(True) == 1
            assert all(s.run_id == first.run_id for s in starter.starts)
            assert await wait_visible(temporal_stack.client, f'Runbook = "{name}"', 1) == 1

            ended = dict(firing[0], endsAt=(datetime.now(UTC) - timedelta(seconds=1)).isoformat())
            assert (await http.post("/api/v2/alerts", json=[ended])).status_code == 200
            await _until(lambda: first.run_id in starter.signalled, 20, "the resolution")
            handle = temporal_stack.client.get_workflow_handle(
                first.workflow_id, result_type=RunbookReport
            )
            status = await handle.query("status", result_type=RunbookStatus)
            assert any("alert RegionErrorRate resolved" in e for e in status.events)
            await finish(temporal_stack.client, first.workflow_id)
            assert (await handle.result()).outcome == "completed"
        count = (await temporal_stack.client.count_workflows(f'Runbook = "{name}"')).count
        assert count == 1


def _alerts(app: FastAPI, outcome: str) -> float:
    """How many alerts the app has answered with ``outcome`` (its own metric)."""
    total = 0.0
    for metric in app.state.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "orchestrator_alerts_total" and sample.labels["outcome"] == outcome:
                total += sample.value
    return total


@pytest.mark.slow
class TestRealAlertmanagerEpisodes:
    """A firing group re-notified every repeat_interval starts exactly one run, also after
    that run has closed; once resolved, firing again starts exactly one more."""

    async def test_one_run_per_episode(
        self, temporal_stack: TemporalStack, unique: str, tmp_path: Path
    ) -> None:
        name = f"drain-{unique}"
        starter = CountingStarter(temporal_stack.starter)
        app = make_app([runbook(name)], starter)
        labels = {"alertname": "RegionErrorRate", "severity": "critical", "region": "eu-west"}
        begun = datetime.now(UTC)
        firing = [{"labels": labels, "startsAt": begun.isoformat()}]
        client = temporal_stack.client
        async with (
            serve_app(app) as base,
            alertmanager(
                tmp_path, alertmanager_config(f"{base}/v1/alerts/alertmanager", TOKEN, "1s")
            ) as am,
            httpx.AsyncClient(base_url=am, timeout=5.0) as http,
        ):
            assert (await http.post("/api/v2/alerts", json=firing)).status_code == 200
            await _until(lambda: _alerts(app, "started") == 1, 15, "the first run")
            first = next(s for s in starter.starts if s.started)
            await finish(client, first.workflow_id)
            await client.get_workflow_handle(first.workflow_id).result()

            # Still firing, run closed: Alertmanager repeats; nothing new starts.
            repeats = _alerts(app, "deduplicated")
            await _until(lambda: _alerts(app, "deduplicated") >= repeats + 3, 20, "3 repeats")
            assert _alerts(app, "started") == 1
            assert await wait_visible(client, f'Runbook = "{name}"', 1) == 1

            # Resolved, then firing again: a new episode.
            ended = dict(firing[0], endsAt=datetime.now(UTC).isoformat())
            assert (await http.post("/api/v2/alerts", json=[ended])).status_code == 200
            await _until(lambda: _alerts(app, "ignored") >= 1, 20, "the resolution")
            await asyncio.sleep(1.5)  # let Alertmanager flush the resolved alert
            again = [{"labels": labels, "startsAt": datetime.now(UTC).isoformat()}]
            assert (await http.post("/api/v2/alerts", json=again)).status_code == 200
            await _until(lambda: _alerts(app, "started") == 2, 20, "the second run")
            repeats = _alerts(app, "deduplicated")
            await _until(lambda: _alerts(app, "deduplicated") >= repeats + 2, 20, "2 repeats")
            assert _alerts(app, "started") == 2
            second = [s for s in starter.starts if s.started][1]
            assert second.workflow_id != first.workflow_id
            await finish(client, second.workflow_id)
        assert (await client.count_workflows(f'Runbook = "{name}"')).count == 2

"""The trigger server against a real Temporal dev server running the real RunbookWorkflow."""

from __future__ import annotations

import asyncio

from temporalio.client import Client, WorkflowExecutionStatus

from orchestrator.contracts.runbook import RunbookReport, RunbookStatus
from orchestrator.temporal import REGION, RUN_KIND, RUNBOOK
from orchestrator.triggers.starter import TemporalRunStarter
from tests.triggers.conftest import (
    AUTH,
    TemporalStack,
    asgi_client,
    end,
    finish,
    make_app,
    started_with,
)
from tests.triggers.payloads import alert, notification, runbook

URL = "/v1/alerts/alertmanager"


async def wait_visible(client: Client, query: str, count: int, timeout_s: float = 10.0) -> int:
    """Visibility is eventually consistent: poll until ``count`` runs match ``query``."""
    seen = -1
    for _ in range(int(timeout_s / 0.1)):
        seen = (await client.count_workflows(query)).count
        if seen >= count:
            return seen
        await asyncio.sleep(0.1)
    return seen


class TestRunLifecycle:
    """Firing starts one run; firing again dedups, also after the run closed; resolved
    signals it; firing after resolving starts a new run."""

    async def test_fire_dedup_resolve_and_start_again(
        self, temporal_stack: TemporalStack, unique: str
    ) -> None:
        name = f"drain-{unique}"
        app = make_app([runbook(name)], temporal_stack.starter)
        firing = notification(alert(region="eu-west"), group_key=f"group-{unique}")
        async with asgi_client(app) as http:
            first = (await http.post(URL, json=firing, headers=AUTH)).json()["results"][0]
            again = (await http.post(URL, json=firing, headers=AUTH)).json()["results"][0]
            assert first["outcome"] == "started"
            assert again["outcome"] == "deduplicated"
            assert again["run_id"] == first["run_id"]

            handle = temporal_stack.client.get_workflow_handle(first["workflow_id"])
            started = await started_with(temporal_stack.client, handle)
            assert started.parameters == {"region": "eu-west", "max_pct": 50}
            assert started.trigger is not None and started.trigger.source == "alertmanager"
            # The run executes the runbook bound to the alert's labels.
            assert started.runbook.parameters["region"].default == "eu-west"
            attrs = (await handle.describe()).typed_search_attributes
            assert (attrs.get(RUNBOOK), attrs.get(RUN_KIND), attrs.get(REGION)) == (
                name,
                "drain",
                "eu-west",
            )

            resolved_alert = alert("resolved", region="eu-west", ends_at="2024-05-01T10:05:00Z")
            resolved = notification(resolved_alert, group_key=f"group-{unique}")
            signalled = (await http.post(URL, json=resolved, headers=AUTH)).json()["results"][0]
            assert signalled["outcome"] == "signalled"
            assert signalled["run_id"] == first["run_id"]
            status = await handle.query("status", result_type=RunbookStatus)
            assert any("alert RegionErrorRate resolved" in e for e in status.events)
            await finish(temporal_stack.client, first["workflow_id"])
            report = await temporal_stack.client.get_workflow_handle(
                first["workflow_id"], result_type=RunbookReport
            ).result()
            assert report.outcome == "completed"

            late = (await http.post(URL, json=resolved, headers=AUTH)).json()["results"][0]
            assert late["outcome"] == "ignored" and "no run" in late["reason"]

        # The same episode re-sent to a server that never saw it: Temporal itself refuses
        # the closed id (REJECT_DUPLICATE).
        async with asgi_client(make_app([runbook(name)], temporal_stack.starter)) as http:
            repeat = (await http.post(URL, json=firing, headers=AUTH)).json()["results"][0]
            assert repeat["outcome"] == "deduplicated"
            assert repeat["workflow_id"] == first["workflow_id"]
            assert repeat["run_id"] == first["run_id"]

            # Fired again after it resolved: a new episode, a new run.
            refired = notification(
                alert(region="eu-west", starts_at="2024-05-01T11:00:00Z"),
                group_key=f"group-{unique}",
            )
            second = (await http.post(URL, json=refired, headers=AUTH)).json()["results"][0]
            assert second["outcome"] == "started"
            assert second["workflow_id"] != first["workflow_id"]
            assert second["run_id"] != first["run_id"]
            await finish(temporal_stack.client, second["workflow_id"])

    async def test_concurrent_duplicates_start_exactly_one(
        self, temporal_stack: TemporalStack, unique: str
    ) -> None:
        name = f"drain-{unique}"
        app = make_app([runbook(name)], temporal_stack.starter)
        body = notification(alert(region="eu-west"), group_key=f"group-{unique}")
        async with asgi_client(app) as http:
            responses = await asyncio.gather(
                *(http.post(URL, json=body, headers=AUTH) for _ in range(15))
            )
        outcomes = sorted(r.json()["results"][0]["outcome"] for r in responses)
        assert outcomes == ["deduplicated"] * 14 + ["started"]
        query = f'Runbook = "{name}"'
        assert await wait_visible(temporal_stack.client, query, 1) == 1
        run_ids = {r.json()["results"][0]["run_id"] for r in responses}
        assert len(run_ids) == 1
        await finish(temporal_stack.client, responses[0].json()["results"][0]["workflow_id"])


class TestCooldownAcrossRestart:
    """A new server process learns the last start of a runbook with these parameters from
    Temporal's visibility; other parameters, and other task queues' runs, are not held back."""

    async def test_new_server_honours_the_cooldown(
        self, temporal_stack: TemporalStack, unique: str
    ) -> None:
        name = f"drain-{unique}"
        rb = runbook(name, cooldown="10m")
        async with asgi_client(make_app([rb], temporal_stack.starter)) as http:
            first = await http.post(
                URL,
                json=notification(alert(region="eu-west"), group_key=f"a-{unique}"),
                headers=AUTH,
            )
        assert first.json()["results"][0]["outcome"] == "started"
        assert await wait_visible(temporal_stack.client, f'Runbook = "{name}"', 1) == 1

        async with asgi_client(make_app([rb], temporal_stack.starter)) as http:
            same = await http.post(
                URL,
                json=notification(alert(region="eu-west", pod="2"), group_key=f"b-{unique}"),
                headers=AUTH,
            )
            other = await http.post(
                URL,
                json=notification(alert(region="us-east"), group_key=f"c-{unique}"),
                headers=AUTH,
            )
        held = same.json()["results"][0]
        assert held["outcome"] == "ignored"
        assert held["reason"].startswith("cooldown:")
        assert other.json()["results"][0]["outcome"] == "started"

        # Another deployment in the namespace (its workers on their own queue) is not held
        # back by this queue's run: its start is not waiting behind a cooldown it never had.
        # Its alert is another episode (pod 3: the first run's id is derived from the first
        # alert's labels, and the terminate below must not reach that run).
        elsewhere = TemporalRunStarter(temporal_stack.client, f"other-{unique}")
        async with asgi_client(make_app([rb], elsewhere)) as http:
            theirs = await http.post(
                URL,
                json=notification(alert(region="eu-west", pod="3"), group_key=f"d-{unique}"),
                headers=AUTH,
            )
        started_elsewhere = theirs.json()["results"][0]
        assert started_elsewhere["outcome"] == "started", started_elsewhere
        assert started_elsewhere["workflow_id"] != first.json()["results"][0]["workflow_id"]
        # Only the starts mattered here. The us-east drain may have been refused beside
        # eu-west's (capacity), so the runs are ended, not approved to completion.
        for result in (first, other, theirs):
            await end(temporal_stack.client, result.json()["results"][0]["workflow_id"])


class TestManualOverTemporal:
    """A manual start runs the runbook with validated, typed parameters."""

    async def test_manual_start(self, temporal_stack: TemporalStack, unique: str) -> None:
        name = f"drain-{unique}"
        async with asgi_client(make_app([runbook(name)], temporal_stack.starter)) as http:
            response = await http.post(
                f"/v1/runbooks/{name}/runs",
                json={"parameters": {"region": "us-east", "max_pct": "20"}, "requested_by": "ana"},
                headers=AUTH,
            )
        assert response.status_code == 201
        handle = temporal_stack.client.get_workflow_handle(response.json()["workflow_id"])
        started = await started_with(temporal_stack.client, handle)
        assert started.parameters == {"region": "us-east", "max_pct": 20}
        assert started.requested_by == "ana"
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        await finish(temporal_stack.client, handle.id)

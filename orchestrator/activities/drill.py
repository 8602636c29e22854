"""What a drill asks the world before it runs: is anything blocking it, which region is due.

Both answers come from outside the workflow (Alertmanager over HTTP, Temporal's
visibility), so they are activities; the decision itself is pure policy code.
"""

from __future__ import annotations

from datetime import datetime

import httpx
from temporalio import activity
from temporalio.client import Client

from orchestrator.contracts.drill import BlockingInput, HistoryInput
from orchestrator.logging import get_logger
from orchestrator.temporal import REGION

__all__ = ["DRAIN_KINDS", "DrillActivities"]

log = get_logger(__name__)

#: the run kinds that move a region's traffic away (a drill's drain is a drain run)
DRAIN_KINDS = ("drain", "drill", "restore")


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _in(values: tuple[str, ...] | list[str]) -> str:
    return "(" + ", ".join(_quoted(v) for v in values) + ")"


class DrillActivities:
    def __init__(self, client: Client, timeout_s: float = 10.0) -> None:
        self._client = client
        self._timeout_s = timeout_s

    @activity.defn(name="drill_blockers")
    async def blockers(self, inp: BlockingInput) -> list[str]:
        """Why a drill must not start now; empty when nothing blocks it."""
        reasons = await self._alerts(inp)
        query = (
            f"ExecutionStatus = 'Running' AND TaskQueue = {_quoted(inp.task_queue)}"
            f" AND RunKind IN {_in(DRAIN_KINDS)}"
        )
        async for execution in self._client.list_workflows(query, limit=100):
            if inp.exclude_prefix and execution.id.startswith(inp.exclude_prefix):
                continue
            reasons.append(f"another drain is running: {execution.id}")
        return reasons

    async def _alerts(self, inp: BlockingInput) -> list[str]:
        if not inp.alertmanager_url:
            return []
        url = inp.alertmanager_url.rstrip("/") + "/api/v2/alerts"
        params = {"active": "true", "silenced": "false", "inhibited": "false"}
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s) as http:
                response = await http.get(url, params=params)
                response.raise_for_status()
                alerts = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            # Unable to prove that nothing critical fires, a drill does not start.
            log.warning("alertmanager unreachable", url=url, error=str(exc))
            return [f"alertmanager {inp.alertmanager_url} unreachable: {type(exc).__name__}"]
        reasons = []
        for alert in alerts if isinstance(alerts, list) else []:
            labels = alert.get("labels") or {}
            if all(labels.get(k) == v for k, v in inp.blocking_labels.items()):
                shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
                reasons.append(f"alert firing: {labels.get('alertname', '?')} ({shown})")
        return reasons

    @activity.defn(name="drain_history")
    async def history(self, inp: HistoryInput) -> dict[str, datetime | None]:
        """Each region's newest drain or drill start on this deployment's task queue."""
        query = (
            f"TaskQueue = {_quoted(inp.task_queue)} AND RunKind IN {_in(('drain', 'drill'))}"
            f" AND Region IN {_in(inp.regions)}"
        )
        last: dict[str, datetime | None] = dict.fromkeys(inp.regions)
        async for execution in self._client.list_workflows(query):
            region = execution.typed_search_attributes.get(REGION)
            if region in last:
                previous = last[region]
                if previous is None or execution.start_time > previous:
                    last[region] = execution.start_time
        return last

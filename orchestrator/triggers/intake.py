"""What the trigger server does with an Alertmanager notification or a manual start.

Runs start with the runbook bound to their parameters (what RunbookWorkflow
executes). For each alert in a notification: firing alerts that match a runbook's trigger
start a run (or are deduplicated against the open run with the same workflow id,
or held back by the runbook's cooldown); resolved alerts are signalled to the
open run they started. Every alert gets an outcome in the answer. A Temporal
failure makes that alert ``failed`` and the answer a 503, so Alertmanager retries
the whole notification; the retry is safe because starts are deduplicated.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator.contracts.runbook import AlertResolvedInput, RunbookRunInput, TriggerContext
from orchestrator.exceptions import RunbookError
from orchestrator.logging import get_logger
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import ParamType, Runbook, RunMode
from orchestrator.triggers.cooldown import Cooldowns, utcnow
from orchestrator.triggers.payload import Alert, AlertmanagerPayload, AlertStatus
from orchestrator.triggers.rules import Ignored, TriggerMatch, manual_workflow_id, match_alert
from orchestrator.triggers.starter import RunStarter, StartFailed, StartRequest

__all__ = [
    "AlertOutcome",
    "Intake",
    "IntakeResult",
    "ManualRun",
    "ManualRunResult",
    "ParameterErrors",
    "UnknownRunbook",
]

log = get_logger(__name__)

Outcome = Literal["started", "deduplicated", "signalled", "ignored", "failed"]


class AlertOutcome(BaseModel):
    fingerprint: str
    alertname: str
    status: AlertStatus
    runbook: str | None = None
    outcome: Outcome
    workflow_id: str | None = None
    run_id: str | None = None
    reason: str = ""


class IntakeResult(BaseModel):
    receiver: str
    group_key: str
    status: AlertStatus
    truncated_alerts: int = 0
    results: list[AlertOutcome]
    counts: dict[str, int] = Field(default_factory=dict)

    @property
    def retry(self) -> bool:
        """Whether the sender should retry (a start or signal failed on Temporal's side)."""
        return any(r.outcome == "failed" for r in self.results)


class ManualRun(BaseModel):
    """Body of ``POST /v1/runbooks/{name}/runs``."""

    model_config = {"extra": "forbid"}

    parameters: dict[str, Any] = Field(default_factory=dict)
    mode: RunMode | None = None
    requested_by: str = Field(default="api", min_length=1, max_length=200)
    #: the same key while the run is open returns that run instead of starting another
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)


class ManualRunResult(BaseModel):
    runbook: str
    workflow_id: str
    run_id: str
    started: bool
    mode: RunMode
    parameters: dict[str, Any]


class UnknownRunbook(RunbookError):
    def __init__(self, name: str, known: Sequence[str]) -> None:
        super().__init__(f"no runbook named {name!r} (known: {', '.join(known) or 'none'})")
        self.name = name


class ParameterErrors(RunbookError):
    """Manual parameters that do not fit the runbook, in FastAPI's 422 ``detail`` shape."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{e['loc'][-1]}: {e['msg']}" for e in errors))
        self.errors = errors


def _region_of(runbook: Runbook, parameters: Mapping[str, Any]) -> str | None:
    for name, param in runbook.parameters.items():
        if param.type is ParamType.REGION and isinstance(parameters.get(name), str):
            return str(parameters[name])
    return None


def check_parameters(runbook: Runbook, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter's value, or :class:`ParameterErrors` naming each bad one."""
    errors: list[dict[str, Any]] = []

    def error(name: str, kind: str, msg: str) -> None:
        errors.append({"loc": ["body", "parameters", name], "msg": msg, "type": kind})

    for name in sorted(set(given) - set(runbook.parameters)):
        known = ", ".join(sorted(runbook.parameters)) or "none"
        error(name, "extra_forbidden", f"unknown parameter (known: {known})")
    values: dict[str, Any] = {}
    for name, param in runbook.parameters.items():
        if given.get(name) is not None:
            try:
                values[name] = param.coerce(given[name])
            except ValueError as exc:
                error(name, "value_error", str(exc))
        elif param.required:
            error(name, "missing", f"required ({param.type.value})")
        else:
            values[name] = param.default
    if errors:
        raise ParameterErrors(errors)
    return values


class Intake:
    def __init__(
        self,
        runbooks: Sequence[Runbook],
        starter: RunStarter,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        names = [r.name for r in runbooks]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise RunbookError(f"two runbooks share the name(s) {', '.join(duplicated)}")
        self.runbooks = {r.name: r for r in runbooks}
        self._starter = starter
        self.cooldowns = Cooldowns(starter.last_start, clock)

    # --- Alertmanager -------------------------------------------------------

    async def alertmanager(self, payload: AlertmanagerPayload) -> IntakeResult:
        results: list[AlertOutcome] = []
        #: workflow id -> outcome already decided in this notification
        seen: dict[str, AlertOutcome] = {}
        runbooks = list(self.runbooks.values())
        for alert in payload.alerts:
            for decision in match_alert(runbooks, alert, payload.group_key):
                results.append(await self._decide(payload, alert, decision, seen))
        if payload.truncated_alerts:
            log.warning(
                "alertmanager truncated alerts",
                receiver=payload.receiver,
                truncated=payload.truncated_alerts,
            )
        counts: dict[str, int] = {}
        for result in results:
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
        return IntakeResult(
            receiver=payload.receiver,
            group_key=payload.group_key,
            status=payload.status,
            truncated_alerts=payload.truncated_alerts,
            results=results,
            counts=counts,
        )

    async def _decide(
        self,
        payload: AlertmanagerPayload,
        alert: Alert,
        decision: TriggerMatch | Ignored,
        seen: dict[str, AlertOutcome],
    ) -> AlertOutcome:
        base = AlertOutcome(
            fingerprint=alert.fingerprint,
            alertname=alert.alertname,
            status=alert.status,
            runbook=decision.runbook,
            outcome="ignored",
        )
        if isinstance(decision, Ignored):
            return base.model_copy(update={"reason": decision.reason})
        base.workflow_id = decision.workflow_id
        previous = seen.get(decision.workflow_id)
        if previous is not None and alert.status == "firing" and previous.status == "firing":
            # Another alert of this notification already mapped to this run.
            outcome: Outcome = "ignored" if previous.outcome == "ignored" else "deduplicated"
            if previous.outcome == "failed":
                outcome = "failed"
            return base.model_copy(
                update={"outcome": outcome, "run_id": previous.run_id, "reason": previous.reason}
            )
        try:
            if alert.status == "resolved":
                result = await self._resolve(alert, decision, base)
            else:
                result = await self._fire(payload, alert, decision, base)
        except StartFailed as exc:
            log.error("temporal call failed", workflow_id=decision.workflow_id, error=str(exc))
            result = base.model_copy(update={"outcome": "failed", "reason": str(exc)})
        seen[decision.workflow_id] = result
        return result

    async def _resolve(self, alert: Alert, match: TriggerMatch, base: AlertOutcome) -> AlertOutcome:
        signal = AlertResolvedInput(
            fingerprint=alert.fingerprint, alertname=alert.alertname, ends_at=alert.ends_at
        )
        run_id = await self._starter.signal_resolved(match.workflow_id, signal)
        if run_id is None:
            return base.model_copy(update={"reason": "resolved, but no run with this id is open"})
        log.info("alert resolved signalled", workflow_id=match.workflow_id, run_id=run_id)
        return base.model_copy(update={"outcome": "signalled", "run_id": run_id})

    async def _fire(
        self, payload: AlertmanagerPayload, alert: Alert, match: TriggerMatch, base: AlertOutcome
    ) -> AlertOutcome:
        runbook = self.runbooks[match.runbook]
        try:
            bound = bind(runbook, match.parameters)
        except RunbookError as exc:
            return base.model_copy(update={"reason": str(exc)})
        request = StartRequest(
            workflow_id=match.workflow_id,
            region=_region_of(runbook, match.parameters),
            input=RunbookRunInput(
                runbook=bound,
                parameters=match.parameters,
                mode=runbook.mode_for(None),
                requested_by=f"alertmanager:{payload.receiver}",
                trigger=TriggerContext(
                    source="alertmanager",
                    key=match.key,
                    labels=dict(alert.labels),
                    fingerprints=[alert.fingerprint],
                    started_at=alert.starts_at,
                ),
            ),
        )
        if match.cooldown_s <= 0:
            return await self._start(request, base)
        cooldowns = self.cooldowns
        async with cooldowns.lock(runbook.name):
            last = await cooldowns.last_start(runbook.name, match.cooldown_s)
            left = cooldowns.remaining_s(last, match.cooldown_s)
            if left <= 0:
                return await self._start(request, base)
        # Held back: say whether that is because this very group's run is still open.
        open_run = await self._starter.open_run(match.workflow_id)
        if open_run is not None:
            return base.model_copy(update={"outcome": "deduplicated", "run_id": open_run})
        reason = (
            f"cooldown: {runbook.name} last started at {last.isoformat() if last else '?'}; "
            f"{left:.0f}s of {match.cooldown_s:.0f}s left"
        )
        return base.model_copy(update={"reason": reason})

    async def _start(self, request: StartRequest, base: AlertOutcome) -> AlertOutcome:
        started_at = self.cooldowns.now()
        result = await self._starter.start(request)
        if not result.started:
            return base.model_copy(update={"outcome": "deduplicated", "run_id": result.run_id})
        self.cooldowns.record(request.input.runbook.name, started_at)
        log.info(
            "run started",
            runbook=request.input.runbook.name,
            workflow_id=result.workflow_id,
            run_id=result.run_id,
        )
        return base.model_copy(update={"outcome": "started", "run_id": result.run_id})

    # --- by hand -------------------------------------------------------------

    async def manual(self, name: str, body: ManualRun) -> ManualRunResult:
        runbook = self.runbooks.get(name)
        if runbook is None:
            raise UnknownRunbook(name, sorted(self.runbooks))
        parameters = check_parameters(runbook, body.parameters)
        try:
            bound = bind(runbook, parameters)
        except RunbookError as exc:
            raise ParameterErrors(
                [{"loc": ["body", "parameters"], "msg": str(exc), "type": "value_error"}]
            ) from None
        mode = runbook.mode_for(body.mode)
        key = body.idempotency_key or uuid.uuid4().hex
        request = StartRequest(
            workflow_id=manual_workflow_id(runbook.name, key),
            region=_region_of(runbook, parameters),
            input=RunbookRunInput(
                runbook=bound,
                parameters=parameters,
                mode=mode,
                requested_by=body.requested_by,
                trigger=TriggerContext(source="api", key=key, started_at=self.cooldowns.now()),
            ),
        )
        # An operator's start is never held back by a cooldown, but it counts as the
        # runbook's last start, so an alert right after it does not start a second run.
        async with self.cooldowns.lock(runbook.name):
            started_at = self.cooldowns.now()
            result = await self._starter.start(request)
            if result.started:
                self.cooldowns.record(runbook.name, started_at)
        log.info("manual run", runbook=name, workflow_id=result.workflow_id, started=result.started)
        return ManualRunResult(
            runbook=name,
            workflow_id=result.workflow_id,
            run_id=result.run_id,
            started=result.started,
            mode=mode,
            parameters=parameters,
        )

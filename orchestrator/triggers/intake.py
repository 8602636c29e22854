"""What the trigger server does with an Alertmanager notification or a manual start.

Runs start with the runbook bound to their parameters (what RunbookWorkflow
executes). For each alert in a notification:

- an alert whose labels are past :data:`~orchestrator.triggers.payload.LIMITS` is
  ``refused``: Temporal could never take it, so no retry can help;
- a firing alert that matches a runbook's trigger starts one run per *episode*
  (:mod:`orchestrator.triggers.episodes`): Alertmanager re-sending the group while
  it still fires is ``deduplicated`` against that run, open or closed, and a group
  that resolved and fires again starts a new one. The runbook's cooldown, kept per
  runbook and parameter set, may hold a start back (``ignored``, reason cooldown);
- a resolved alert is signalled to the open run of its episode.

Every alert gets an outcome in the answer, is counted in
``orchestrator_alerts_total``, and every one that starts nothing is logged with its
reason. A Temporal failure makes that alert ``failed`` and the answer a 503, so
Alertmanager retries the whole notification (safe: starts are deduplicated); a
notification where alerts were refused and nothing else happened is a 422.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from orchestrator.contracts.runbook import AlertResolvedInput, RunbookRunInput, TriggerContext
from orchestrator.exceptions import RunbookError
from orchestrator.logging import get_logger
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import Runbook
from orchestrator.triggers.cooldown import Cooldowns, utcnow
from orchestrator.triggers.episodes import Episodes
from orchestrator.triggers.manual import ManualRun, ManualRunResult, region_of, start_manual
from orchestrator.triggers.metrics import ReasonCode, TriggerMetrics
from orchestrator.triggers.payload import Alert, AlertmanagerPayload, AlertStatus, oversize
from orchestrator.triggers.rules import Ignored, TriggerMatch, match_alert
from orchestrator.triggers.starter import RunStarter, StartFailed, StartRequest

__all__ = ["AlertOutcome", "Intake", "IntakeResult"]

log = get_logger(__name__)

Outcome = Literal["started", "deduplicated", "signalled", "ignored", "refused", "failed"]


class AlertOutcome(BaseModel):
    fingerprint: str
    alertname: str
    status: AlertStatus
    runbook: str | None = None
    outcome: Outcome
    workflow_id: str | None = None
    run_id: str | None = None
    #: a short, fixed code (the metric's ``reason`` label); ``reason`` says it in words
    code: ReasonCode = ""
    reason: str = ""


class IntakeResult(BaseModel):
    receiver: str
    group_key: str
    status: AlertStatus
    truncated_alerts: int = 0
    results: list[AlertOutcome]
    counts: dict[str, int] = Field(default_factory=dict)
    #: why alerts were refused, in FastAPI's 422 ``detail`` shape (field by field)
    detail: list[dict[str, object]] = Field(default_factory=list)

    @property
    def retry(self) -> bool:
        """Whether the sender should retry (a start or signal failed on Temporal's side)."""
        return any(r.outcome == "failed" for r in self.results)

    @property
    def refused(self) -> bool:
        """Whether to answer 4xx: alerts were refused and nothing was started or signalled
        (a partly served notification is 200, the refused alerts listed in it)."""
        acted = any(r.outcome in ("started", "signalled") for r in self.results)
        return bool(self.detail) and not acted


class _KnownRuns:
    """Workflow ids of alert episodes Temporal has confirmed, and their run ids (LRU).

    An episode's id never starts twice (REJECT_DUPLICATE), so once seen it is a
    duplicate for good and repeats need no call to Temporal at all.
    """

    MAX = 10_000

    def __init__(self) -> None:
        self._runs: OrderedDict[str, str] = OrderedDict()

    def get(self, workflow_id: str) -> str | None:
        run_id = self._runs.get(workflow_id)
        if run_id is not None:
            self._runs.move_to_end(workflow_id)
        return run_id

    def add(self, workflow_id: str, run_id: str) -> None:
        self._runs[workflow_id] = run_id
        self._runs.move_to_end(workflow_id)
        while len(self._runs) > self.MAX:
            self._runs.popitem(last=False)


class Intake:
    def __init__(
        self,
        runbooks: Sequence[Runbook],
        starter: RunStarter,
        *,
        clock: Callable[[], datetime] = utcnow,
        metrics: TriggerMetrics | None = None,
    ) -> None:
        names = [r.name for r in runbooks]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise RunbookError(f"two runbooks share the name(s) {', '.join(duplicated)}")
        self.runbooks = {r.name: r for r in runbooks}
        self._starter = starter
        self.cooldowns = Cooldowns(starter.last_start, clock)
        self.episodes = Episodes(clock)
        self.metrics = metrics or TriggerMetrics()
        self._known = _KnownRuns()

    # --- Alertmanager -------------------------------------------------------

    async def alertmanager(self, payload: AlertmanagerPayload) -> IntakeResult:
        runbooks = list(self.runbooks.values())
        detail: list[dict[str, object]] = []
        plan: list[tuple[Alert, list[TriggerMatch | Ignored] | None]] = []
        for index, alert in enumerate(payload.alerts):
            errors = oversize(payload, index, alert)
            detail.extend(errors)
            plan.append(
                (alert, None if errors else match_alert(runbooks, alert, payload.group_key))
            )
        episodes = self._episodes(plan)
        results: list[AlertOutcome] = []
        #: workflow id -> outcome already decided in this notification
        seen: dict[str, AlertOutcome] = {}
        for alert, decisions in plan:
            if decisions is None:
                results.append(self._refused(alert))
                continue
            for decision in decisions:
                episode = (
                    episodes.get(decision.identity) if isinstance(decision, TriggerMatch) else None
                )
                results.append(await self._decide(payload, alert, decision, episode, seen))
        if payload.truncated_alerts:
            log.warning(
                "alertmanager truncated alerts",
                receiver=payload.receiver,
                truncated=payload.truncated_alerts,
            )
        counts: dict[str, int] = {}
        for result in results:
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
            self._account(payload, result)
        return IntakeResult(
            receiver=payload.receiver,
            group_key=payload.group_key,
            status=payload.status,
            truncated_alerts=payload.truncated_alerts,
            results=results,
            counts=counts,
            detail=detail,
        )

    def _episodes(
        self, plan: Sequence[tuple[Alert, list[TriggerMatch | Ignored] | None]]
    ) -> dict[str, datetime | None]:
        """The episode start of every identity in the notification, from all its alerts."""
        alerts: defaultdict[str, list[Alert]] = defaultdict(list)
        for alert, decisions in plan:
            for decision in decisions or []:
                if isinstance(decision, TriggerMatch):
                    alerts[decision.identity].append(alert)
        return {
            identity: self.episodes.observe(identity, group) for identity, group in alerts.items()
        }

    def _account(self, payload: AlertmanagerPayload, result: AlertOutcome) -> None:
        """Count every alert; log every one that started nothing, with its reason."""
        self.metrics.alert(result.outcome, result.code, result.runbook)
        if result.outcome in ("started", "signalled"):
            return
        loud = result.outcome in ("refused", "failed") or result.code == "bad_label"
        (log.warning if loud else log.info)(
            "alert started nothing",
            outcome=result.outcome,
            code=result.code,
            reason=result.reason,
            runbook=result.runbook,
            alertname=result.alertname[:200],
            fingerprint=result.fingerprint[:128],
            status=result.status,
            workflow_id=result.workflow_id,
            receiver=payload.receiver[:200],
        )

    @staticmethod
    def _refused(alert: Alert) -> AlertOutcome:
        return AlertOutcome(
            fingerprint=alert.fingerprint[:128],
            alertname=alert.alertname[:200],
            status=alert.status,
            outcome="refused",
            code="oversize",
            reason="labels too large for a run (see detail)",
        )

    async def _decide(
        self,
        payload: AlertmanagerPayload,
        alert: Alert,
        decision: TriggerMatch | Ignored,
        episode: datetime | None,
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
            return base.model_copy(update={"code": decision.code, "reason": decision.reason})
        workflow_id = decision.workflow_id(episode or alert.starts_at)
        base.workflow_id = workflow_id
        previous = seen.get(workflow_id)
        if previous is not None and alert.status == "firing" and previous.status == "firing":
            # Another alert of this notification already mapped to this run.
            outcome: Outcome = previous.outcome
            code = previous.code
            if outcome == "started":
                outcome, code = "deduplicated", "duplicate"
            return base.model_copy(
                update={
                    "outcome": outcome,
                    "code": code,
                    "run_id": previous.run_id,
                    "reason": previous.reason or "another alert of this notification asked first",
                }
            )
        try:
            if alert.status == "resolved":
                result = await self._resolve(alert, decision, base)
            else:
                result = await self._fire(payload, alert, decision, base)
        except StartFailed as exc:
            log.error("temporal call failed", workflow_id=workflow_id, error=str(exc))
            result = base.model_copy(
                update={"outcome": "failed", "code": "temporal", "reason": str(exc)}
            )
        seen[workflow_id] = result
        return result

    async def _resolve(self, alert: Alert, match: TriggerMatch, base: AlertOutcome) -> AlertOutcome:
        assert base.workflow_id is not None
        signal = AlertResolvedInput(
            fingerprint=alert.fingerprint, alertname=alert.alertname, ends_at=alert.ends_at
        )
        run_id = await self._starter.signal_resolved(base.workflow_id, signal)
        if run_id is None:
            return base.model_copy(
                update={
                    "code": "no_open_run",
                    "reason": "resolved, but no run of this alert episode is open",
                }
            )
        log.info("alert resolved signalled", workflow_id=base.workflow_id, run_id=run_id)
        return base.model_copy(update={"outcome": "signalled", "run_id": run_id})

    def _duplicate(self, base: AlertOutcome, run_id: str, state: str) -> AlertOutcome:
        assert base.workflow_id is not None
        self._known.add(base.workflow_id, run_id)
        reason = f"duplicate: this alert episode's run {base.workflow_id} {state}"
        return base.model_copy(
            update={
                "outcome": "deduplicated",
                "code": "duplicate",
                "run_id": run_id,
                "reason": reason,
            }
        )

    async def _fire(
        self, payload: AlertmanagerPayload, alert: Alert, match: TriggerMatch, base: AlertOutcome
    ) -> AlertOutcome:
        assert base.workflow_id is not None
        known = self._known.get(base.workflow_id)
        if known is not None:
            return self._duplicate(base, known, "was started already (open or closed)")
        runbook = self.runbooks[match.runbook]
        try:
            bound = bind(runbook, match.parameters)
        except RunbookError as exc:
            return base.model_copy(update={"code": "bad_label", "reason": str(exc)})
        region = region_of(runbook, match.parameters)
        request = StartRequest(
            workflow_id=base.workflow_id,
            region=region,
            once=True,
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
        async with cooldowns.lock(runbook.name, match.parameters):
            last = await cooldowns.last_start(
                runbook.name, match.parameters, match.cooldown_s, region
            )
            left = cooldowns.remaining_s(last, match.cooldown_s)
            if left <= 0:
                return await self._start(request, base)
        # Held back: say so only if this episode has no run yet (after a restart this
        # process does not remember the ids it saw).
        found = await self._starter.find_run(base.workflow_id)
        if found is not None:
            return self._duplicate(base, found.run_id, "is open" if found.open else "has closed")
        reason = (
            f"cooldown: {runbook.name} with these parameters last started at "
            f"{last.isoformat() if last else '?'}; {left:.0f}s of {match.cooldown_s:.0f}s left"
        )
        return base.model_copy(update={"code": "cooldown", "reason": reason})

    async def _start(self, request: StartRequest, base: AlertOutcome) -> AlertOutcome:
        started_at = self.cooldowns.now()
        result = await self._starter.start(request)
        if not result.started:
            return self._duplicate(base, result.run_id, "was started already (open or closed)")
        self._known.add(request.workflow_id, result.run_id)
        self.cooldowns.record(request.input.runbook.name, request.input.parameters, started_at)
        log.info(
            "run started",
            runbook=request.input.runbook.name,
            workflow_id=result.workflow_id,
            run_id=result.run_id,
        )
        return base.model_copy(update={"outcome": "started", "run_id": result.run_id})

    # --- by hand -------------------------------------------------------------

    async def manual(self, name: str, body: ManualRun) -> ManualRunResult:
        return await start_manual(self.runbooks, self._starter, self.cooldowns, name, body)

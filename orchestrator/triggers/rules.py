"""Which runbooks an alert starts, with which parameters, under which workflow id.

Pure: runbooks and an alert in, decisions out. A runbook's first trigger whose
alertname and matchers fit the alert's labels decides; its label mapping fills
the runbook's parameters, each coerced by the parameter's own type, so a label
such as ``max_pct="lots"`` ignores that alert (with the reason) and nothing else.

The workflow id is ``<runbook>-alert-<hash>-<episode>``. The hash (the match's
*identity*) covers the dedup key (the Alertmanager ``groupKey``, or the alert's
fingerprint when the trigger is per alert) and the filled parameters, so two alerts
of one group that ask for different regions still get a run each. The episode is
the start of the trouble (:mod:`orchestrator.triggers.episodes`): a group re-sent
by Alertmanager while it fires maps to the same id, which Temporal refuses to start
a second time even after the first run closed (the starter's reuse policy), while a
group that resolved and fires again has a later episode and so a new id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator.contracts.runbook import runbook_workflow_id
from orchestrator.exceptions import RunbookError
from orchestrator.runbook.params import resolve_parameters, substitute
from orchestrator.runbook.spec import Runbook, Trigger
from orchestrator.runbook.types import parse_duration
from orchestrator.triggers.episodes import episode_stamp
from orchestrator.triggers.payload import Alert

__all__ = [
    "DedupScope",
    "Ignored",
    "TriggerMatch",
    "dedup_scope",
    "manual_workflow_id",
    "match_alert",
    "parameters_key",
    "stable_hash",
]

DedupScope = Literal["group", "alert"]


class TriggerMatch(BaseModel):
    """An alert that asks for a run of ``runbook``."""

    runbook: str
    alertname: str
    scope: DedupScope
    #: the groupKey or the fingerprint, as Alertmanager sent it
    key: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    #: hash of (runbook, scope, key, parameters): the alerts that ask for the same run
    identity: str
    cooldown_s: float = Field(ge=0)

    def workflow_id(self, episode: datetime) -> str:
        """The run's id for the episode that started at ``episode``."""
        return runbook_workflow_id(self.runbook, f"alert-{self.identity}-{episode_stamp(episode)}")


class Ignored(BaseModel):
    """An alert (for ``runbook``, when one matched) that starts nothing, and why."""

    runbook: str | None = None
    #: ``no_rule`` (no trigger matches) or ``bad_label`` (labels do not fill the runbook)
    code: Literal["no_rule", "bad_label"] = "bad_label"
    reason: str


def stable_hash(*parts: Any, length: int = 16) -> str:
    """A short hex digest of ``parts`` that is the same in every process and release."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def parameters_key(parameters: Mapping[str, Any]) -> str:
    """The same for the same parameter set: what a cooldown is kept per (with the runbook)."""
    return stable_hash(dict(parameters))


def dedup_scope(trigger: Trigger) -> DedupScope:
    """``alert`` when the trigger asks for one run per alert, else one run per group.

    Read with getattr: the runbook format may not declare ``per_alert`` yet, and a
    trigger without it deduplicates per group (Alertmanager's own unit of notification).
    """
    return "alert" if getattr(trigger, "per_alert", False) else "group"


def _cooldown(trigger: Trigger, parameters: Mapping[str, Any], runbook: Runbook) -> float:
    value = trigger.cooldown
    if isinstance(value, str):
        value = substitute(value, parameters, runbook.parameters)
    return parse_duration(value)


def _match_one(runbook: Runbook, trigger: Trigger, alert: Alert, group_key: str) -> TriggerMatch:
    """The match for ``alert`` on ``trigger``; raises ``RunbookError`` with the reason."""
    absent = sorted(
        f"{label} (for parameter {param})"
        for param, label in trigger.parameters.items()
        if label not in alert.labels
        and (declared := runbook.parameters.get(param)) is not None
        and declared.required
    )
    if absent:
        raise RunbookError(f"alert has no label {', '.join(absent)}")
    parameters = resolve_parameters(runbook, trigger.parameters_from(alert.labels))
    try:
        cooldown = _cooldown(trigger, parameters, runbook)
    except (KeyError, ValueError) as exc:
        raise RunbookError(f"trigger {trigger.alertname}: cooldown: {exc}") from None
    scope = dedup_scope(trigger)
    key = alert.fingerprint if scope == "alert" else group_key
    return TriggerMatch(
        runbook=runbook.name,
        alertname=alert.alertname,
        scope=scope,
        key=key,
        parameters=parameters,
        identity=stable_hash(runbook.name, scope, key, parameters),
        cooldown_s=cooldown,
    )


def match_alert(
    runbooks: Sequence[Runbook], alert: Alert, group_key: str
) -> list[TriggerMatch | Ignored]:
    """One decision per runbook with a trigger for the alert; ``[Ignored]`` when none has."""
    decisions: list[TriggerMatch | Ignored] = []
    for runbook in runbooks:
        trigger = next((t for t in runbook.triggers if t.matches(alert.labels)), None)
        if trigger is None:
            continue
        try:
            decisions.append(_match_one(runbook, trigger, alert, group_key))
        except RunbookError as exc:
            reason = str(exc).removeprefix(f"runbook {runbook.name}: ")
            decisions.append(Ignored(runbook=runbook.name, reason=reason))
    if not decisions:
        decisions.append(
            Ignored(
                code="no_rule",
                reason=f"no runbook trigger matches alertname={alert.alertname!r}",
            )
        )
    return decisions


def manual_workflow_id(runbook: str, idempotency_key: str) -> str:
    """The id of a run started by hand; the same idempotency key maps to the same run."""
    return runbook_workflow_id(runbook, f"manual-{stable_hash(idempotency_key)}")

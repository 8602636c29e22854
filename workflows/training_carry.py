"""What the training supervisor carries across continue-as-new, bounded (issue 24).

Pure and deterministic: the supervisor workflow calls :func:`carry` right before each
continue-as-new (behind its ``training-bounded-carry`` patch), and reads ETTR over every
failure with :func:`observed_ettr_carried`.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.contracts.failure_totals import (
    downtime_s,
    fold_failures,
    outages_of,
    totals_of,
)
from orchestrator.contracts.training_supervisor import SupervisorInput
from orchestrator.policy.training.crashloop import trim_attempts
from orchestrator.policy.training.ettr_observed import observed_ettr
from orchestrator.policy.training.models import QuarantinePolicy
from orchestrator.policy.training.quarantine import prune_quarantine

__all__ = ["carry", "compute_share", "observed_ettr_carried"]

_KEEP_MOVES = 20


def carry(inp: SupervisorInput, now: datetime) -> SupervisorInput:
    """The input continue-as-new carries: the newest records in full, totals over the rest,
    and the crash-loop attempts that still decide anything (bounded however long it runs)."""
    started = inp.started_at or now
    totals, kept = fold_failures(
        inp.totals, inp.failures, keep=inp.keep_failures, started=started, now=now
    )
    attempts = trim_attempts(inp.attempts, keep=inp.crash_loop_limit + 2)
    # The recovery child quarantines under the default policy and reads only offences and
    # active records; the fleet lets a host back in at ``until`` (no release from here).
    quarantine = prune_quarantine(inp.quarantine, now, QuarantinePolicy(), for_release=False)
    return inp.model_copy(
        update={
            "failures": [f.compacted() for f in kept],
            "totals": totals,
            "attempts": attempts,
            "quarantine": quarantine,
            # the newest moves keep their request ids answering (a retried Update)
            "moves": inp.moves[-_KEEP_MOVES:],
        }
    )


def observed_ettr_carried(inp: SupervisorInput, now: datetime, step_s: float) -> float | None:
    """Observed ETTR over every failure: the folded outages plus the kept records',
    checkpoint writes taken out of the running time when the input states their cost."""
    started = inp.started_at or now
    if inp.totals is None:
        ettr = observed_ettr(outages_of(inp.failures), started=started, now=now, step_s=step_s)
        return None if ettr is None else ettr * compute_share(inp)
    wall = (now - started).total_seconds()
    if wall <= 0:
        return None
    totals = totals_of(inp.totals, inp.failures)
    lost = downtime_s(inp.totals, inp.failures, started=started, now=now)
    lost += totals.lost_steps * step_s
    return max(wall - lost, 0.0) / wall * compute_share(inp)


def compute_share(inp: SupervisorInput) -> float:
    """The share of a running job's time spent computing: Δt / (Δt + w). A failure's lost
    steps are compute; the rest of the time it ran was Δt of compute per w of writing
    (a write cut short by a failure is counted at this share too: under w per failure)."""
    interval = inp.checkpoint_interval_s
    if not inp.checkpoint_write_s or interval is None:
        return 1.0
    return interval / (interval + inp.checkpoint_write_s)

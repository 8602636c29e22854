"""Moved to orchestrator.contracts.runbook; kept while callers move."""

from orchestrator.contracts.runbook import *  # noqa: F403

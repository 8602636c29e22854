"""Faults the lab can inject when started with ``--faults`` (never otherwise)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from orchestrator.models import Fraction, StrictModel

__all__ = ["LabFaults"]


class LabFaults(StrictModel):
    """The whole fault set; a POST replaces it, a DELETE clears it."""

    #: regions that answer every data-plane request (and dependency call) with 503
    region_outage: list[str] = Field(default_factory=list)
    #: region -> extra latency added to every request it serves, ms
    added_latency_ms: dict[str, Annotated[float, Field(ge=0.0, le=60_000.0)]] = Field(
        default_factory=dict
    )
    #: region -> share of its data-plane requests answered 500
    error_rate: dict[str, Fraction] = Field(default_factory=dict)
    #: share of /v1 calls answered 500 before doing anything
    api_error_rate: Fraction = 0.0
    #: share of /v1 calls that hang ``api_hang_s`` before being served
    api_hang_rate: Fraction = 0.0
    api_hang_s: float = Field(default=30.0, gt=0.0, le=600.0)

    def regions_named(self) -> set[str]:
        return set(self.region_outage) | set(self.added_latency_ms) | set(self.error_rate)

    @property
    def any_api_fault(self) -> bool:
        return self.api_error_rate > 0 or self.api_hang_rate > 0

"""The fleet contract's vocabulary: topology, routing, health, actions and audit.

These models are shared by the lab server, the HTTP client, the activities and
the workflows (through the pydantic data converter), so they stay free of I/O.
Every boundary validates with them: unknown fields are refused, and a failed
validation names the field.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "API_VERSION",
    "AuditEntry",
    "BatchJob",
    "BatchJobAction",
    "Building",
    "ConfigChange",
    "Fraction",
    "HealthReport",
    "Metrics",
    "MutationResult",
    "Pop",
    "PopHealth",
    "Region",
    "RegionHealth",
    "RegionStatus",
    "RoutingTable",
    "RoutingWrite",
    "Service",
    "ServiceHealth",
    "ServiceKind",
    "ServiceWeightChange",
    "Shard",
    "ShardMove",
    "StrictModel",
    "Topology",
]

#: The fleet API version this code speaks; the path prefix is ``/v1``.
API_VERSION = "v1"

#: A share of something, between 0 and 1 inclusive.
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]

#: Sums of fractions are accepted within this tolerance.
FRACTION_SUM_TOLERANCE = 1e-6


class StrictModel(BaseModel):
    """A model that refuses unknown fields, so a typo is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid")


# --- topology ---------------------------------------------------------------


class ServiceKind(StrEnum):
    STATELESS = "stateless"
    STICKY = "sticky"
    STATEFUL = "stateful"
    BATCH = "batch"


class RegionStatus(StrEnum):
    ACTIVE = "active"
    #: unhealthy or in maintenance: gets no new traffic
    ABNORMAL = "abnormal"
    DRAINED = "drained"


class Service(StrictModel):
    name: str = Field(min_length=1)
    kind: ServiceKind
    depends_on: list[str] = Field(default_factory=list)


class Building(StrictModel):
    name: str = Field(min_length=1)
    region: str
    #: share of its region's serving capacity the building holds; None: an equal split
    share: float | None = Field(default=None, gt=0.0, le=1.0)
    #: False while the building has no power: its share serves nothing
    powered: bool = True


class Region(StrictModel):
    name: str = Field(min_length=1)
    buildings: list[str] = Field(default_factory=list)
    #: service name -> requests per second the region can serve at utilization 1
    capacity_rps: dict[str, Annotated[float, Field(ge=0.0)]] = Field(default_factory=dict)
    status: RegionStatus = RegionStatus.ACTIVE


class Pop(StrictModel):
    """An edge point of presence; users arrive here and are routed to regions."""

    name: str = Field(min_length=1)
    #: relative share of total user demand arriving at this PoP
    demand_weight: float = Field(gt=0.0)
    #: region name -> round-trip time from this PoP, in milliseconds
    rtt_ms: dict[str, Annotated[float, Field(ge=0.0)]]


class Shard(StrictModel):
    """A stateful shard (e.g. kv) whose primary lives in one region."""

    id: str
    service: str
    primary: str


class BatchJob(StrictModel):
    name: str
    region: str
    running: bool = True


class Topology(StrictModel):
    regions: list[Region]
    buildings: list[Building] = Field(default_factory=list)
    pops: list[Pop]
    services: list[Service]
    shards: list[Shard] = Field(default_factory=list)
    batch_jobs: list[BatchJob] = Field(default_factory=list)
    #: (region, service) pool weights, keyed "region/service"; absent means 1.0
    service_weights: dict[str, Fraction] = Field(default_factory=dict)
    bucket_count: int = Field(default=1024, ge=1)

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(name)

    @property
    def region_names(self) -> list[str]:
        return [r.name for r in self.regions]

    def building(self, name: str) -> Building:
        for building in self.buildings:
            if building.name == name:
                return building
        raise KeyError(name)

    def building_share(self, name: str) -> float:
        """The share of its region's serving capacity building ``name`` holds."""
        building = self.building(name)
        if building.share is not None:
            return building.share
        peers = [b for b in self.buildings if b.region == building.region]
        return 1.0 / len(peers)


# --- routing ----------------------------------------------------------------


def _check_fractions(fractions: dict[str, dict[str, float]]) -> None:
    for pop, shares in fractions.items():
        total = sum(shares.values())
        if any(s < 0 or s > 1 for s in shares.values()):
            raise ValueError(f"fractions.{pop}: every share must be within [0, 1]")
        if abs(total - 1.0) > FRACTION_SUM_TOLERANCE:
            raise ValueError(f"fractions.{pop}: shares sum to {total:.6f}, not 1")


class RoutingTable(StrictModel):
    """Per PoP, the share of traffic each region gets, realised as user buckets."""

    version: int = Field(ge=0)
    #: pop -> region -> fraction; each PoP's fractions sum to 1
    fractions: dict[str, dict[str, float]]
    #: pop -> region of each bucket (index = bucket id); None where not realised
    buckets: dict[str, list[str]] | None = None
    updated_at: datetime | None = None
    reason: str = ""

    @model_validator(mode="after")
    def _sums(self) -> RoutingTable:
        _check_fractions(self.fractions)
        return self


class RoutingWrite(StrictModel):
    """A new routing table; the writer sends the version it read as If-Match."""

    fractions: dict[str, dict[str, float]]
    #: the bucket realisation; when omitted the fleet derives a stable one
    buckets: dict[str, list[str]] | None = None
    reason: str = Field(default="", max_length=500)

    @model_validator(mode="after")
    def _sums(self) -> RoutingWrite:
        _check_fractions(self.fractions)
        return self


# --- health -----------------------------------------------------------------


class Metrics(StrictModel):
    """Numbers over one window. ``None`` means no data, never zero."""

    rps: float | None = None
    utilization: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    error_rate: float | None = None
    samples: int = Field(default=0, ge=0)

    @property
    def missing(self) -> bool:
        return self.samples == 0


class RegionHealth(Metrics):
    region: str


class ServiceHealth(Metrics):
    region: str
    service: str


class PopHealth(Metrics):
    pop: str


class HealthReport(StrictModel):
    window_s: float = Field(gt=0)
    observed_at: datetime
    regions: list[RegionHealth] = Field(default_factory=list)
    services: list[ServiceHealth] = Field(default_factory=list)
    pops: list[PopHealth] = Field(default_factory=list)

    def region(self, name: str) -> RegionHealth:
        for entry in self.regions:
            if entry.region == name:
                return entry
        return RegionHealth(region=name)


# --- actions ----------------------------------------------------------------


class ServiceWeightChange(StrictModel):
    """Set the weight of a service pool in a region (0 = drained, 1 = full)."""

    region: str
    service: str
    weight: Fraction


class ShardMove(StrictModel):
    """Move the primaries of the named shards to ``to_region``."""

    shards: list[str] = Field(min_length=1)
    to_region: str


class BatchJobAction(StrictModel):
    job: str
    action: Literal["start", "stop"]


class ConfigChange(StrictModel):
    path: str = Field(min_length=1)
    content: str
    #: optimistic concurrency: the revision the writer expects to replace
    expected_rev: int | None = None


class MutationResult(StrictModel):
    """The fleet's answer to a mutation; a replayed key returns the first answer."""

    idempotency_key: str
    audit_seq: int
    kind: str
    detail: dict[str, Any] = Field(default_factory=dict)


class AuditEntry(StrictModel):
    seq: int
    at: datetime
    idempotency_key: str
    kind: str
    request: dict[str, Any]
    response: dict[str, Any]

"""The lab's YAML configuration: what the fleet looks like and how it behaves.

The file is validated with pydantic and cross-checked (every PoP has an RTT to
every region, shards and batch jobs name real regions...), so a typo fails at
load time with the field named instead of surfacing as odd physics later.
``default.yaml`` next to this module documents every field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from orchestrator.exceptions import ConfigError
from orchestrator.lab.training.config import TrainingLabConfig
from orchestrator.models import (
    BatchJob,
    Building,
    Pop,
    Region,
    RegionStatus,
    Service,
    ServiceKind,
    Shard,
    StrictModel,
    Topology,
)

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "BatchJobConfig",
    "ColdConfig",
    "LabConfig",
    "MetricsConfig",
    "PopConfig",
    "RegionConfig",
    "ServiceCapacity",
    "ServiceConfig",
    "load_config",
    "parse_config",
]

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default.yaml")

PositiveFloat = Annotated[float, Field(gt=0.0)]
NonNegativeFloat = Annotated[float, Field(ge=0.0)]


class ServiceConfig(StrictModel):
    name: str = Field(min_length=1)
    kind: ServiceKind
    depends_on: list[str] = Field(default_factory=list)
    #: share of edge (user) requests asking for this service; 0 for internal services
    demand_share: NonNegativeFloat = 0.0


class ServiceCapacity(StrictModel):
    """One service pool in one region: ``slots / service_time`` requests per second."""

    slots: int = Field(ge=1)
    service_time_ms: PositiveFloat
    #: requests allowed to wait for a slot; the next one gets 503
    queue_limit: int = Field(ge=0)

    @property
    def capacity_rps(self) -> float:
        return self.slots / (self.service_time_ms / 1000.0)


class RegionConfig(StrictModel):
    name: str = Field(min_length=1)
    buildings: list[str] = Field(min_length=1)
    #: building -> share of the region's serving capacity it holds; equal split when absent
    building_shares: dict[str, Annotated[float, Field(gt=0.0, le=1.0)]] | None = None
    status: RegionStatus = RegionStatus.ACTIVE
    services: dict[str, ServiceCapacity]

    @model_validator(mode="after")
    def _shares_cover_buildings(self) -> RegionConfig:
        if self.building_shares is None:
            return self
        if set(self.building_shares) != set(self.buildings):
            raise ValueError(
                f"building_shares: needs exactly the buildings {sorted(self.buildings)}"
            )
        total = sum(self.building_shares.values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"building_shares: shares sum to {total:.6f}, not 1")
        return self

    def building_share(self, building: str) -> float:
        """The share of this region's serving capacity ``building`` holds."""
        if self.building_shares is not None:
            return self.building_shares[building]
        return 1.0 / len(self.buildings)


class PopConfig(StrictModel):
    name: str = Field(min_length=1)
    demand_weight: PositiveFloat
    rtt_ms: dict[str, NonNegativeFloat]


class BatchJobConfig(StrictModel):
    name: str = Field(min_length=1)
    region: str
    #: share of every service pool's slots in ``region`` the job takes while running
    slot_share: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.25
    running: bool = False


class MetricsConfig(StrictModel):
    #: default health window, seconds
    window_s: PositiveFloat = 10.0
    #: how far back samples are kept: the largest window a health read may ask for
    retention_s: PositiveFloat = 60.0

    @model_validator(mode="after")
    def _retention_covers_window(self) -> MetricsConfig:
        if self.retention_s < self.window_s:
            raise ValueError("retention_s must be at least window_s")
        return self


class ColdConfig(StrictModel):
    """A bucket new to a region is served ``factor`` times slower until it warms."""

    factor: Annotated[float, Field(ge=1.0)] = 3.0
    #: a bucket is warm once it has been in the region this long...
    warm_after_s: NonNegativeFloat = 5.0
    #: ...or has been served this many requests there, whichever comes first
    warm_after_requests: int = Field(default=30, ge=0)
    #: a bucket away from a region this long is cold there again when it comes back
    evict_after_s: PositiveFloat = 120.0


class SessionsConfig(StrictModel):
    #: a sticky session ends this long after it started
    ttl_s: PositiveFloat = 30.0


class DemandConfig(StrictModel):
    #: model mode: total edge requests per second, split over PoPs by demand weight
    total_rps: NonNegativeFloat = 300.0


InitialRouting = Literal["capacity", "nearest"] | dict[str, dict[str, float]]


class LabConfig(StrictModel):
    bucket_count: int = Field(default=1024, ge=1024)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    cold: ColdConfig = Field(default_factory=ColdConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    demand: DemandConfig = Field(default_factory=DemandConfig)
    services: list[ServiceConfig] = Field(min_length=1)
    regions: list[RegionConfig] = Field(min_length=1)
    #: symmetric; one direction per pair is enough
    inter_region_rtt_ms: dict[str, dict[str, NonNegativeFloat]] = Field(default_factory=dict)
    pops: list[PopConfig] = Field(min_length=1)
    #: service -> region -> number of shard primaries that region holds
    shards: dict[str, dict[str, int]] = Field(default_factory=dict)
    batch_jobs: list[BatchJobConfig] = Field(default_factory=list)
    initial_routing: InitialRouting = "capacity"
    #: GPU hosts per building, the spare pool and training jobs
    training: TrainingLabConfig = Field(default_factory=TrainingLabConfig)

    @model_validator(mode="after")
    def _cross_references(self) -> LabConfig:
        _unique("services", [s.name for s in self.services])
        _unique("regions", [r.name for r in self.regions])
        _unique("pops", [p.name for p in self.pops])
        _unique("batch_jobs", [j.name for j in self.batch_jobs])
        _unique("buildings", [b for r in self.regions for b in r.buildings])
        services = {s.name: s for s in self.services}
        regions = {r.name for r in self.regions}
        for s in self.services:
            for dep in s.depends_on:
                if dep not in services or dep == s.name:
                    raise ValueError(f"services.{s.name}.depends_on: unknown service {dep!r}")
        if not any(s.demand_share > 0 for s in self.services):
            raise ValueError("services: at least one service needs a demand_share above 0")
        for r in self.regions:
            missing = sorted(set(services) - set(r.services))
            extra = sorted(set(r.services) - set(services))
            if missing or extra:
                raise ValueError(f"regions.{r.name}.services: missing {missing}, unknown {extra}")
        for a in regions:
            for b in regions:
                if a != b and self.rtt_between(a, b) is None:
                    raise ValueError(f"inter_region_rtt_ms: no RTT between {a} and {b}")
        for src, row in self.inter_region_rtt_ms.items():
            for dst in [src, *row]:
                if dst not in regions:
                    raise ValueError(f"inter_region_rtt_ms.{src}: unknown region {dst!r}")
        for p in self.pops:
            if set(p.rtt_ms) != regions:
                raise ValueError(
                    f"pops.{p.name}.rtt_ms: needs exactly the regions {sorted(regions)}"
                )
        for svc, per_region in self.shards.items():
            if svc not in services or services[svc].kind != ServiceKind.STATEFUL:
                raise ValueError(f"shards.{svc}: not a stateful service")
            for region, count in per_region.items():
                if region not in regions or count < 0:
                    raise ValueError(f"shards.{svc}.{region}: unknown region or negative count")
            if sum(per_region.values()) == 0:
                raise ValueError(f"shards.{svc}: needs at least one shard")
        for job in self.batch_jobs:
            if job.region not in regions:
                raise ValueError(f"batch_jobs.{job.name}.region: unknown region {job.region!r}")
        for tj in self.training.jobs:
            if tj.region not in regions:
                raise ValueError(f"training.jobs.{tj.name}.region: unknown region {tj.region!r}")
        _unique("training.jobs", [j.name for j in self.training.jobs])
        if isinstance(self.initial_routing, dict):
            for pop, shares in self.initial_routing.items():
                if pop not in {p.name for p in self.pops}:
                    raise ValueError(f"initial_routing.{pop}: unknown PoP")
                if not set(shares) <= regions:
                    raise ValueError(f"initial_routing.{pop}: unknown region")
                if abs(sum(shares.values()) - 1.0) > 1e-6:
                    raise ValueError(f"initial_routing.{pop}: shares must sum to 1")
        return self

    # --- derived views ---------------------------------------------------

    def rtt_between(self, a: str, b: str) -> float | None:
        if a == b:
            return 0.0
        forward = self.inter_region_rtt_ms.get(a, {}).get(b)
        return forward if forward is not None else self.inter_region_rtt_ms.get(b, {}).get(a)

    def service(self, name: str) -> ServiceConfig:
        for s in self.services:
            if s.name == name:
                return s
        raise KeyError(name)

    def region(self, name: str) -> RegionConfig:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)

    @property
    def front_services(self) -> list[ServiceConfig]:
        """Services users ask for at the edge (a positive demand share)."""
        return [s for s in self.services if s.demand_share > 0]

    def shard_list(self) -> list[Shard]:
        shards: list[Shard] = []
        for svc, per_region in sorted(self.shards.items()):
            for region, count in sorted(per_region.items()):
                for _ in range(count):
                    shards.append(Shard(id=f"{svc}-{len(shards):04d}", service=svc, primary=region))
        return shards

    def initial_fractions(self) -> dict[str, dict[str, float]]:
        active = [r for r in self.regions if r.status == RegionStatus.ACTIVE] or self.regions
        given = self.initial_routing if isinstance(self.initial_routing, dict) else {}
        out: dict[str, dict[str, float]] = {}
        for pop in self.pops:
            if pop.name in given:
                out[pop.name] = {r: f for r, f in given[pop.name].items() if f > 0}
            elif self.initial_routing == "nearest":
                nearest = min(active, key=lambda r: (pop.rtt_ms[r.name], r.name))
                out[pop.name] = {nearest.name: 1.0}
            else:
                weights = {r.name: self.front_capacity(r.name) for r in active}
                total = sum(weights.values())
                out[pop.name] = {r: w / total for r, w in weights.items()}
        return out

    def front_capacity(self, region: str) -> float:
        """Requests per second of edge traffic a region can take, by its front services."""
        cfg = self.region(region)
        front = self.front_services
        share = sum(s.demand_share for s in front)
        # The binding front service decides: demand splits by share across them.
        return min(cfg.services[s.name].capacity_rps / (s.demand_share / share) for s in front)

    def topology(self) -> Topology:
        return Topology(
            regions=[
                Region(
                    name=r.name,
                    buildings=list(r.buildings),
                    capacity_rps={s: c.capacity_rps for s, c in r.services.items()},
                    status=r.status,
                )
                for r in self.regions
            ],
            buildings=[
                Building(name=b, region=r.name, share=r.building_share(b))
                for r in self.regions
                for b in r.buildings
            ],
            pops=[
                Pop(name=p.name, demand_weight=p.demand_weight, rtt_ms=dict(p.rtt_ms))
                for p in self.pops
            ],
            services=[
                Service(name=s.name, kind=s.kind, depends_on=list(s.depends_on))
                for s in self.services
            ],
            shards=self.shard_list(),
            batch_jobs=[
                BatchJob(name=j.name, region=j.region, running=j.running) for j in self.batch_jobs
            ],
            bucket_count=self.bucket_count,
        )


def _unique(field: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{field}: duplicate name {name!r}")
        seen.add(name)


def parse_config(data: object, *, source: str = "config") -> LabConfig:
    """Validate already-parsed YAML; a failure names the field and the reason."""
    try:
        return LabConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise ConfigError(f"{source}: {loc}", first["msg"]) from None


def load_config(path: str | Path | None = None) -> LabConfig:
    """Read and validate a lab config file (the shipped default when ``path`` is None)."""
    file = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigError(str(file), f"cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(file), f"not valid YAML: {exc}") from None
    return parse_config(data, source=str(file))

"""Lab configs: the shipped default is complete; a bad file fails naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.exceptions import ConfigError
from orchestrator.lab.config import DEFAULT_CONFIG_PATH, load_config
from orchestrator.lab.generate import generate_config
from orchestrator.models import ServiceKind


class TestDefaultConfig:
    """default.yaml has >= 3 regions of 2 buildings, 6 PoPs and the five service kinds."""

    def test_shape(self) -> None:
        config = load_config()
        assert len(config.regions) >= 3
        assert all(len(r.buildings) == 2 for r in config.regions)
        assert len(config.pops) == 6
        kinds = {s.name: s.kind for s in config.services}
        assert kinds == {
            "web": ServiceKind.STATELESS,
            "sessions": ServiceKind.STICKY,
            "cache": ServiceKind.STATELESS,
            "kv": ServiceKind.STATEFUL,
            "batch": ServiceKind.BATCH,
        }
        topology = config.topology()
        assert {s.primary for s in topology.shards} == {r.name for r in config.regions}
        assert topology.region("us-east").capacity_rps["web"] == pytest.approx(100.0)

    def test_initial_routing_sums_to_one(self) -> None:
        for shares in load_config().initial_fractions().values():
            assert sum(shares.values()) == pytest.approx(1.0)


def _write(tmp_path: Path, mutate) -> Path:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    mutate(data)
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class TestBadConfig:
    """Every invalid config raises ConfigError naming where it is wrong."""

    @pytest.mark.parametrize(
        ("mutate", "named"),
        [
            (
                lambda d: d["regions"][0]["services"]["web"].update(slots=0),
                "regions.0.services.web.slots",
            ),
            (lambda d: d["pops"][0]["rtt_ms"].pop("eu-west"), "pops.nyc.rtt_ms"),
            (lambda d: d["services"][0].update(depends_on=["nope"]), "services.web.depends_on"),
            (lambda d: d.update(bucket_count=100), "bucket_count"),
            (lambda d: d.update(colour="blue"), "colour"),
            (lambda d: d["batch_jobs"][0].update(region="mars"), "batch_jobs.index-build.region"),
            (lambda d: d["shards"].update(web={"us-east": 1}), "shards.web"),
        ],
    )
    def test_field_is_named(self, tmp_path: Path, mutate, named: str) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(ConfigError) as caught:
            load_config(_write(tmp_path, mutate))
        assert named in str(caught.value)

    def test_unreadable_and_not_yaml(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="cannot read"):
            load_config(tmp_path / "missing.yaml")
        broken = tmp_path / "broken.yaml"
        broken.write_text("regions: [unclosed")
        with pytest.raises(ConfigError, match="not valid YAML"):
            load_config(broken)


class TestGenerator:
    """Generated big configs are valid and deterministic."""

    def test_big_config(self) -> None:
        config = generate_config(pops=200, regions=20, seed=3)
        again = generate_config(pops=200, regions=20, seed=3)
        assert len(config.pops) == 200 and len(config.regions) == 20
        assert config == again
        capacity = sum(config.front_capacity(r.name) for r in config.regions)
        assert config.demand.total_rps == pytest.approx(0.6 * capacity)

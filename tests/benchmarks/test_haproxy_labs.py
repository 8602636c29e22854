"""The labs the HAProxy benchmarks build are valid and hold what their docstrings say."""

from __future__ import annotations

import random

from benchmarks import kraken_haproxy, rebalance_haproxy
from orchestrator.lab.config import LabConfig


def web_capacity(config: LabConfig, region: str) -> float:
    pool = next(r for r in config.regions if r.name == region).services["web"]
    return pool.slots / (pool.service_time_ms / 1000.0)


class TestLabs:
    """rebalance_haproxy: the shipped lab's web pools 10x (2,750 rps for 1,200 offered);
    kraken_haproxy: a target holding 1,000 rps to within a slot, no batch job."""

    def test_rebalance_lab_is_the_shipped_one_ten_times(self) -> None:
        config = LabConfig.model_validate(rebalance_haproxy.lab_config())
        total = sum(web_capacity(config, r.name) for r in config.regions)
        assert total == 2750.0 and config.initial_routing == "nearest"

    def test_kraken_target_holds_its_capacity(self) -> None:
        for seed in (7, 108, 209):
            config = LabConfig.model_validate(kraken_haproxy.lab_config(random.Random(seed)))
            target = web_capacity(config, kraken_haproxy.TARGET)
            pool = config.regions[0].services["web"]
            assert abs(target - 1000.0) <= 1000.0 / pool.slots
            assert not config.batch_jobs

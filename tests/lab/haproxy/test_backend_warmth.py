"""A region backend's cold buckets follow the routing, as the Python lab's do
(orchestrator/lab/live.py): cold from the moment a bucket is moved in, warm while routed
here however quiet, evicted only ``evict_after_s`` after it left. Pure: a fake clock."""

from __future__ import annotations

from orchestrator.fleet.haproxy.state import BOOT_KEY
from orchestrator.lab.config import load_config
from orchestrator.lab.haproxy.backend import RegionBackend, routed_to

WARM_AFTER_S = 5.0  # the default lab's cold.warm_after_s
EVICT_AFTER_S = 120.0  # and its evict_after_s


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def backend(routed: set[tuple[str, int]]) -> tuple[RegionBackend, Clock]:
    clock = Clock()
    config = load_config(None)
    assert (config.cold.warm_after_s, config.cold.evict_after_s) == (WARM_AFTER_S, EVICT_AFTER_S)
    region = RegionBackend(config, "us-east", routed)
    region.metrics._clock = clock
    return region, clock


class TestWarmth:
    """Warmth is about where the routing sends a bucket, not how often it is asked for."""

    def test_a_boot_bucket_stays_warm_while_routed_here_however_quiet(self) -> None:
        region, clock = backend({("nyc", 1)})
        assert region.cold("nyc", 1) is False
        clock.t += 10 * EVICT_AFTER_S
        assert region.cold("nyc", 1) is False

    def test_a_bucket_moved_here_is_cold_from_the_move_until_warm_after_s(self) -> None:
        region, clock = backend(set())
        region.follow_routing({("nyc", 2)})
        clock.t += WARM_AFTER_S - 1
        assert region.cold("nyc", 2) is True
        clock.t += 2  # counted from the move, not from its first request here
        assert region.cold("nyc", 2) is False

    def test_a_bucket_back_within_evict_after_s_is_still_warm(self) -> None:
        region, clock = backend({("nyc", 3), ("nyc", 4)})
        region.follow_routing(set())  # both leave
        clock.t += EVICT_AFTER_S - 1
        region.follow_routing({("nyc", 3)})
        assert region.cold("nyc", 3) is False
        clock.t += 2
        region.follow_routing({("nyc", 3), ("nyc", 4)})  # back after eviction
        assert region.cold("nyc", 4) is True

    def test_served_without_being_routed_here_is_cold_on_arrival(self) -> None:
        region, clock = backend(set())
        assert region.cold("lon", 5) is True  # balanced over from a drained region
        clock.t += WARM_AFTER_S + 1
        assert region.cold("lon", 5) is False  # kept fresh while such traffic lasts
        clock.t += EVICT_AFTER_S + 1
        assert region.cold("lon", 5) is True


class TestRoutedTo:
    """The routing is read from HAProxy's ``show map`` or from the boot map file alike;
    the map's own bookkeeping keys are not buckets."""

    def test_show_map_and_the_map_file_give_the_same_buckets(self) -> None:
        live = f"0x1 nyc/0 us-east\n0x2 nyc/1 us-west\n0x3 lon/7 us-east\n0x4 {BOOT_KEY} abc\n"
        file = "nyc/0 us-east\nnyc/1 us-west\nlon/7 us-east\n"
        assert (
            routed_to(live, "us-east")
            == routed_to(file, "us-east")
            == {
                ("nyc", 0),
                ("lon", 7),
            }
        )
        assert routed_to(live, "eu-west") == set()

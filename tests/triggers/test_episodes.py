"""Alert episodes, without a server: when a firing group is the same trouble or a new one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from orchestrator.triggers.episodes import Episodes, chain_start, episode_stamp

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
NONE = datetime(1, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class A:
    fingerprint: str
    starts_at: datetime
    status: str = "firing"
    ends_at: datetime | None = NONE


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


class TestChainStart:
    """One notification: the earliest firing startsAt, reaching back through resolved
    alerts that overlapped it."""

    def test_one_firing_alert_is_its_own_start(self) -> None:
        assert chain_start([A("a", minutes(3))]) == minutes(3)

    def test_earliest_of_the_firing_alerts(self) -> None:
        assert chain_start([A("b", minutes(5)), A("a", minutes(1))]) == minutes(1)

    def test_a_resolved_alert_that_overlapped_extends_the_episode_back(self) -> None:
        alerts = [A("a", minutes(0), "resolved", minutes(7)), A("b", minutes(5))]
        assert chain_start(alerts) == minutes(0)

    def test_a_resolved_alert_that_ended_before_does_not(self) -> None:
        alerts = [A("a", minutes(0), "resolved", minutes(2)), A("b", minutes(5))]
        assert chain_start(alerts) == minutes(5)

    def test_all_resolved_gives_the_chain_of_the_last(self) -> None:
        alerts = [A("a", minutes(0), "resolved", minutes(7)), A("b", minutes(5), "resolved")]
        assert chain_start(alerts) == minutes(0)
        assert chain_start([A("a", minutes(2), "resolved", minutes(4))]) == minutes(2)

    def test_naive_and_offset_times_compare_as_utc(self) -> None:
        naive = datetime(2024, 5, 1, 10, 0)
        assert chain_start([A("a", naive)]) == T0
        assert episode_stamp(naive) == "20240501T100000.000Z"
        assert episode_stamp(minutes(0.0125)) == "20240501T100000.750Z"


class TestEpisodes:
    """Across notifications: repeats keep the episode, a resolved-then-firing group starts a
    new one, and an episode survives its first alert resolving while another fires."""

    def test_repeats_of_a_firing_alert_keep_the_episode(self) -> None:
        episodes = Episodes()
        for _ in range(5):
            assert episodes.observe("id", [A("a", minutes(0))]) == minutes(0)

    def test_resolved_then_firing_again_is_a_new_episode(self) -> None:
        episodes = Episodes()
        assert episodes.observe("id", [A("a", minutes(0))]) == minutes(0)
        resolved = [A("a", minutes(0), "resolved", minutes(10))]
        assert episodes.observe("id", resolved) == minutes(0)
        assert len(episodes) == 0
        assert episodes.observe("id", [A("a", minutes(20))]) == minutes(20)

    def test_the_episode_outlives_its_first_alert(self) -> None:
        """A at 10:00; B joins at 10:05; A resolves at 10:07; then only B is sent."""
        episodes = Episodes()
        assert episodes.observe("id", [A("a", minutes(0))]) == minutes(0)
        assert episodes.observe("id", [A("a", minutes(0)), A("b", minutes(5))]) == minutes(0)
        overlap = [A("a", minutes(0), "resolved", minutes(7)), A("b", minutes(5))]
        assert episodes.observe("id", overlap) == minutes(0)
        assert episodes.observe("id", [A("b", minutes(5))]) == minutes(0)
        assert episodes.observe("id", [A("b", minutes(5), "resolved", minutes(9))]) == minutes(0)

    def test_without_memory_the_remaining_alert_starts_its_own(self) -> None:
        """What a restarted process sees (documented in the module)."""
        assert Episodes().observe("id", [A("b", minutes(5))]) == minutes(5)

    def test_a_refired_alert_with_a_new_start_is_not_taken_for_the_old_one(self) -> None:
        """send_resolved off: the resolution is never seen, only the new startsAt."""
        episodes = Episodes()
        assert episodes.observe("id", [A("a", minutes(0))]) == minutes(0)
        assert episodes.observe("id", [A("a", minutes(30))]) == minutes(30)

    def test_identities_are_independent(self) -> None:
        episodes = Episodes()
        assert episodes.observe("eu", [A("a", minutes(0))]) == minutes(0)
        assert episodes.observe("us", [A("b", minutes(4))]) == minutes(4)
        assert episodes.observe("us", [A("b", minutes(4), "resolved", minutes(6))]) == minutes(4)
        assert episodes.observe("eu", [A("a", minutes(0))]) == minutes(0)

    def test_memory_is_bounded_in_time_and_size(self) -> None:
        now = [T0]
        episodes = Episodes(clock=lambda: now[0])
        episodes.MAX_IDENTITIES = 3
        for i in range(5):
            episodes.observe(f"id{i}", [A("a", minutes(0))])
        assert len(episodes) == 3
        now[0] = T0 + Episodes.TTL + timedelta(seconds=1)
        episodes.observe("fresh", [A("a", minutes(0))])
        assert len(episodes) == 1

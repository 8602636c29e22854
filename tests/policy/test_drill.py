"""Pure drill decisions: blocked windows and the least recently drained region."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.policy.drain.drill import blocking_window, least_recently_drained, parse_window

# 2024-05-03 is a Friday
FRI_2300 = datetime(2024, 5, 3, 23, 0, tzinfo=UTC)
SAT_0300 = datetime(2024, 5, 4, 3, 0, tzinfo=UTC)
SAT_1200 = datetime(2024, 5, 4, 12, 0, tzinfo=UTC)


class TestBlockedWindows:
    """A window blocks inside [start, end) UTC, on its days; one crossing midnight belongs
    to the day it starts."""

    def test_plain_and_overnight_windows(self) -> None:
        day = parse_window("09:00-17:00")
        night = parse_window("22:00-06:00")
        assert blocking_window([day], SAT_1200) == day
        assert blocking_window([day], FRI_2300) is None
        assert blocking_window([night], FRI_2300) == night
        assert blocking_window([night], SAT_0300) == night
        assert blocking_window([night], SAT_1200) is None

    def test_days_apply_to_the_start_of_the_window(self) -> None:
        friday_night = parse_window("fri 22:00-06:00")
        assert blocking_window([friday_night], SAT_0300) == friday_night  # Friday's window
        saturday_night = parse_window("sat 22:00-06:00")
        assert blocking_window([saturday_night], SAT_0300) is None
        weekend = parse_window("sat,sun 00:00-24:00")
        assert blocking_window([weekend], SAT_1200) == weekend
        assert blocking_window([weekend], FRI_2300) is None

    def test_bad_windows_are_refused(self) -> None:
        with pytest.raises(ValueError, match="unknown day"):
            parse_window("funday 00:00-01:00")
        with pytest.raises(ValueError):
            parse_window("25:00-26:00")
        with pytest.raises(ValueError, match="HH:MM-HH:MM"):
            parse_window("09:00")


class TestLeastRecentlyDrained:
    """Never drained comes first, then the oldest drain; ties go by name."""

    def test_order(self) -> None:
        old, new = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 2, 1, tzinfo=UTC)
        assert least_recently_drained(["a", "b", "c"], {"a": new, "b": None, "c": old}) == "b"
        assert least_recently_drained(["a", "c"], {"a": new, "c": old}) == "c"
        assert least_recently_drained(["z", "y"], {}) == "y"
        with pytest.raises(ValueError):
            least_recently_drained([], {})

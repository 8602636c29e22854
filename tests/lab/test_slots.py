"""A pool's slots and queue are booked on the clock: capacity is slots / hold, exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.lab.slots import Booking, SlotPool


def _holding(bookings: list[Booking], t: float) -> int:
    return sum(1 for b in bookings if b.start <= t < b.finish)


class TestAdmission:
    """A request starts at once while a slot is free, waits FIFO while the queue has room,
    and is refused when every slot is taken and the queue is full."""

    def test_a_burst_fills_the_slots_then_the_queue_then_is_refused(self) -> None:
        pool = SlotPool(slots=2, queue_limit=3)
        answers = [pool.admit(0.0, 0.1) for _ in range(8)]
        admitted = [a for a in answers if a is not None]
        assert len(admitted) == 5 and answers[5:] == [None, None, None]
        assert [a.start for a in admitted] == [0.0, 0.0, 0.1, 0.1, 0.2]
        assert pool.queued(0.0) == 3

    def test_no_queue_refuses_whoever_would_wait(self) -> None:
        pool = SlotPool(slots=1, queue_limit=0)
        assert pool.admit(0.0, 1.0) == Booking(0.0, 1.0)
        assert pool.admit(0.5, 1.0) is None
        assert pool.admit(1.0, 1.0) == Booking(1.0, 2.0)

    def test_arrivals_at_exactly_the_capacity_never_wait(self) -> None:
        pool = SlotPool(slots=4, queue_limit=0)
        hold = 0.125  # binary fractions: the clock arithmetic below is exact
        for k in range(1000):
            now = k * hold / 4
            booking = pool.admit(now, hold)
            assert booking is not None and booking.start == now, k


class TestResizing:
    """A batch job taking slots away shrinks the pool; the holds already booked run out."""

    def test_shrinking_keeps_the_slots_that_free_first(self) -> None:
        pool = SlotPool(slots=3, queue_limit=10)
        for hold in (0.1, 0.2, 0.3):
            pool.admit(0.0, hold)
        pool.set_slots(1)
        assert pool.slots == 1
        assert pool.admit(0.0, 0.1) == Booking(0.1, 0.2)

    def test_growing_adds_free_slots_and_never_goes_below_one(self) -> None:
        pool = SlotPool(slots=1, queue_limit=0)
        pool.admit(0.0, 1.0)
        pool.set_slots(2)
        assert pool.admit(0.0, 1.0) == Booking(0.0, 1.0)
        pool.set_slots(0)
        assert pool.slots == 1


arrivals = st.lists(st.tuples(st.floats(0, 0.05), st.floats(0.001, 0.2)), min_size=1, max_size=200)


class TestInvariants:
    """Whatever the arrivals: never more holds than slots, never more waiting than the
    queue allows, FIFO starts, and a refusal only when the queue was full."""

    @given(
        slots=st.integers(1, 8),
        queue_limit=st.integers(0, 16),
        gaps_and_holds=arrivals,
    )
    def test_bounds_hold(
        self, slots: int, queue_limit: int, gaps_and_holds: list[tuple[float, float]]
    ) -> None:
        pool = SlotPool(slots, queue_limit)
        now, bookings = 0.0, []
        for gap, hold in gaps_and_holds:
            now += gap
            waiting_before = sum(1 for b in bookings if b.start > now)
            booking = pool.admit(now, hold)
            if booking is None:
                assert waiting_before == queue_limit
                assert _holding(bookings, now) == slots
                continue
            assert booking.start >= now and booking.finish == booking.start + hold
            assert not bookings or booking.start >= bookings[-1].start
            bookings.append(booking)
            assert sum(1 for b in bookings if b.start > now) <= queue_limit
        for b in bookings:
            assert _holding(bookings, b.start) <= slots

"""PhaseClock, PhaseTotals, the active clock and perf_phase, driven by a fake time source."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from trainperf.core.clock import (
    PHASES,
    PhaseClock,
    active_clock,
    perf_phase,
    set_active_clock,
)


class FakeNow:
    """Integer nanoseconds that move only when the test says so."""

    def __init__(self) -> None:
        self.t = 1_000

    def __call__(self) -> int:
        return self.t

    def advance(self, ns: int) -> None:
        self.t += ns


@pytest.fixture
def now() -> FakeNow:
    return FakeNow()


@pytest.fixture
def clock(now: FakeNow) -> PhaseClock:
    return PhaseClock(now=now)


@pytest.fixture(autouse=True)
def _no_active_clock() -> Iterator[None]:
    set_active_clock(None)
    yield
    set_active_clock(None)


def test_totals_are_the_intervals_and_sum_to_wall(clock: PhaseClock, now: FakeNow) -> None:
    clock.start("data_wait")
    now.advance(10)
    assert clock.switch("forward") == "data_wait"
    now.advance(25)
    assert clock.switch("backward") == "forward"
    now.advance(7)
    assert clock.switch("forward") == "backward"
    now.advance(3)
    totals = clock.stop()
    assert totals.wall_ns == 45
    assert totals.phases_ns == {
        **dict.fromkeys(PHASES, 0),
        "data_wait": 10,
        "forward": 28,
        "backward": 7,
    }
    assert sum(totals.phases_ns.values()) == totals.wall_ns


def test_random_switch_sequences_sum_exactly_to_wall(now: FakeNow) -> None:
    rng = np.random.default_rng(7)
    clock = PhaseClock(now=now)
    for _ in range(20):
        clock.start(str(rng.choice(PHASES)))
        expected = dict.fromkeys(PHASES, 0)
        current = clock.current
        assert current is not None
        for _ in range(200):
            step = int(rng.integers(0, 10**9))
            now.advance(step)
            expected[current] += step
            nxt = str(rng.choice(PHASES))
            assert clock.switch(nxt) == current
            current = nxt
        tail = int(rng.integers(0, 1000))
        now.advance(tail)
        expected[current] += tail
        totals = clock.stop()
        assert totals.phases_ns == expected
        assert sum(totals.phases_ns.values()) == totals.wall_ns


def test_state_flags_and_default_phase(clock: PhaseClock, now: FakeNow) -> None:
    assert not clock.running
    assert clock.current is None
    clock.start()
    assert clock.running
    assert clock.current == "unattributed"
    now.advance(5)
    totals = clock.stop()
    assert totals.phases_ns["unattributed"] == 5
    assert not clock.running
    assert clock.current is None


def test_switch_to_the_open_phase_keeps_accumulating(clock: PhaseClock, now: FakeNow) -> None:
    clock.start("metric")
    now.advance(4)
    assert clock.switch("metric") == "metric"
    now.advance(6)
    assert clock.stop().phases_ns["metric"] == 10


def test_switch_is_ignored_when_not_running(clock: PhaseClock, now: FakeNow) -> None:
    assert clock.switch("forward") == ""
    assert clock.current is None
    clock.start("forward")
    now.advance(3)
    clock.stop()
    assert clock.switch("backward") == ""
    assert not clock.running


def test_start_resets_the_totals(clock: PhaseClock, now: FakeNow) -> None:
    clock.start("forward")
    now.advance(100)
    clock.start("backward")  # restart while running drops the old window
    now.advance(1)
    totals = clock.stop()
    assert totals.wall_ns == 1
    assert totals.phases_ns["forward"] == 0
    assert totals.phases_ns["backward"] == 1


def test_peek_counts_the_open_phase_and_keeps_running(clock: PhaseClock, now: FakeNow) -> None:
    clock.start("data_wait")
    now.advance(4)
    clock.switch("forward")
    now.advance(6)
    peeked = clock.peek()
    assert peeked.wall_ns == 10
    assert peeked.phases_ns["forward"] == 6
    assert clock.running
    assert clock.current == "forward"
    now.advance(1)
    assert clock.stop().phases_ns["forward"] == 7


def test_stop_or_peek_when_not_running_is_an_error(clock: PhaseClock) -> None:
    with pytest.raises(RuntimeError, match="not running"):
        clock.stop()
    with pytest.raises(RuntimeError, match="not running"):
        clock.peek()


def test_unknown_phase_is_a_value_error(clock: PhaseClock) -> None:
    with pytest.raises(ValueError, match="'forwrad'"):
        clock.switch("forwrad")  # also while stopped
    with pytest.raises(ValueError, match="unknown phase"):
        clock.start("training")
    clock.start()
    with pytest.raises(ValueError, match="unknown phase"):
        clock.switch("")
    assert clock.current == "unattributed"  # a rejected switch changes nothing
    with pytest.raises(ValueError, match="unknown phase"), perf_phase("gpu"):
        pass


def test_active_clock_round_trip(clock: PhaseClock) -> None:
    assert active_clock() is None
    set_active_clock(clock)
    assert active_clock() is clock
    set_active_clock(None)
    assert active_clock() is None


def test_perf_phase_nesting_restores_the_previous_phase(clock: PhaseClock, now: FakeNow) -> None:
    set_active_clock(clock)
    clock.start("forward")
    now.advance(1)
    with perf_phase("postprocess"):
        assert clock.current == "postprocess"
        now.advance(10)
        with perf_phase("metric"):
            assert clock.current == "metric"
            now.advance(100)
        assert clock.current == "postprocess"
        now.advance(1000)
    assert clock.current == "forward"
    now.advance(10000)
    totals = clock.stop()
    assert totals.phases_ns["forward"] == 10001
    assert totals.phases_ns["postprocess"] == 1010
    assert totals.phases_ns["metric"] == 100
    assert sum(totals.phases_ns.values()) == totals.wall_ns


def test_perf_phase_restores_on_exception(clock: PhaseClock, now: FakeNow) -> None:
    set_active_clock(clock)
    clock.start("callbacks")

    def failing_block() -> None:
        with perf_phase("metric"):
            now.advance(5)
            raise KeyError("boom")

    with pytest.raises(KeyError):
        failing_block()
    assert clock.current == "callbacks"
    assert clock.stop().phases_ns["metric"] == 5


def test_perf_phase_is_a_no_op_without_an_active_running_clock(
    clock: PhaseClock, now: FakeNow
) -> None:
    with perf_phase("metric"):  # no active clock at all
        now.advance(5)
    set_active_clock(clock)
    with perf_phase("metric"):  # active but stopped
        now.advance(5)
    assert not clock.running
    assert clock.current is None


def test_perf_phase_leaves_a_clock_stopped_inside_the_block_alone(
    clock: PhaseClock, now: FakeNow
) -> None:
    set_active_clock(clock)
    clock.start("forward")
    with perf_phase("metric"):
        now.advance(2)
        totals = clock.stop()
    assert totals.phases_ns["metric"] == 2
    assert not clock.running

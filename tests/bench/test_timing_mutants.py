"""The timing statistics and loops on constructed samples and a fake clock, with known answers: the
sampling rule's stops (the time budget needs n >= 5, never more than max_samples, the precision check),
percentile and median-interval indices, the per-launch summary, warm-up, the spin hold and both clocks'
arithmetic. A fake ``perf_counter`` that only moves when the code under test runs makes every figure exact."""

from __future__ import annotations

import math
import types

import pytest
import torch

from kopt_core.bench import timing
from kopt_core.bench.timing import (
    MAX_SPIN_US,
    MIN_SPIN_US,
    CudaEventClock,
    HostClock,
    Samples,
    escaped_work,
    median_ci_rel,
    percentile,
    sample_until_stable,
    spin_for,
    summarize,
    warm_up,
)
from kopt_core.records import BenchOptions

U = 2.0**-16  # seconds: a step of the fake clock that stays exact in binary through * 1e3 and * 1e6


class FakeTime:
    """Stands in for the ``time`` module inside kopt_core.bench.timing; ``now`` moves only when told."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock_time(monkeypatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


class RecordingClock:
    """A host-side Clock that logs its syncs (with the launch count at each) and its hold."""

    name = "fake"

    def __init__(self) -> None:
        self.syncs: list[int] = []
        self.calls = 0
        self.held: list[float] = []

    def sync(self) -> None:
        self.syncs.append(self.calls)

    def hold(self, microseconds: float) -> None:
        self.held.append(microseconds)

    def time(self, fn) -> tuple[float, float]:
        raise AssertionError("warm_up and spin_for time with perf_counter, not the clock")


def launcher(fake: FakeTime, clock: RecordingClock, durations, limit: int = 200):
    """fn for warm_up/spin_for: each call advances the fake clock by the next duration (seconds)."""
    steps = iter(durations)

    def fn() -> None:
        clock.calls += 1
        assert clock.calls <= limit, "the loop ran away"
        fake.now += next(steps)

    return fn


# -- median interval -------------------------------------------------------------------------------


def test_median_interval_uses_the_order_statistics_at_n_over_2_plus_minus_1_96_sqrt_n_over_2():
    # n = 100: half = 9.8, so ordered[40] and ordered[60] (floor and ceil); the median is 50.5.
    samples = [float(i) for i in range(100, 0, -1)]  # 1..100, given unsorted
    assert median_ci_rel(samples) == (61.0 - 41.0) / (2 * 50.5)


def test_median_interval_at_six_samples_spans_the_whole_sample():
    # n = 6: half = 2.4, floor(0.6) = 0 and ceil(5.4) = 6 clamped to the last index, 5.
    assert median_ci_rel([6.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == (6.0 - 1.0) / (2 * 3.5)
    assert median_ci_rel([1.0, 2.0, 3.0, 4.0, 5.0]) == math.inf  # five say nothing


def test_median_interval_at_thirty_samples():
    # n = 30: half = 1.96 * sqrt(30) / 2 = 5.367, so floor(9.63) = 9 and ceil(20.37) = 21.
    samples = [float(i * i) for i in range(30)]
    assert median_ci_rel(samples) == (21.0**2 - 9.0**2) / (2 * (14.0**2 + 15.0**2) / 2)


def test_median_interval_of_a_zero_or_negative_median_is_infinite():
    assert median_ci_rel([-1.0, 0.0, 0.0, 0.0, 0.0, 1.0]) == math.inf
    assert median_ci_rel([-3.0, -2.0, -2.0, -2.0, -2.0, -1.0]) == math.inf


# -- percentile ------------------------------------------------------------------------------------


def test_percentile_interpolates_between_neighbouring_order_statistics():
    ordered = [1.0, 2.0, 4.0, 8.0, 16.0]
    assert percentile(ordered, 0.3) == pytest.approx(2.0 + (4.0 - 2.0) * 0.2, rel=1e-12)  # pos 1.2
    assert percentile(ordered, 0.0) == 1.0
    assert percentile(ordered, 0.5) == 4.0
    assert percentile(ordered, 1.0) == 16.0  # the last index, not one past it
    assert percentile([7.0], 0.95) == 7.0
    assert math.isnan(percentile([], 0.5))


def test_p95_of_twenty_samples():
    ordered = [float(i) for i in range(1, 21)]
    assert percentile(ordered, 0.95) == pytest.approx(19.05, rel=1e-12)  # pos 18.05: 19 + 0.05 * (20 - 19)


# -- the sampling rule -----------------------------------------------------------------------------


def taker(fake: FakeTime, values, step: float = 1.0, limit: int = 10_000):
    """take() for sample_until_stable: each sample costs ``step`` seconds of the fake clock."""
    count = 0

    def take() -> tuple[float, float]:
        nonlocal count
        assert count < limit, "sampling ran away"
        value = values[count % len(values)]
        count += 1
        fake.now += step
        return value, value + 0.5

    return take


def test_the_time_budget_stops_at_five_samples_at_the_earliest(clock_time):
    options = BenchOptions(min_samples=1000, max_samples=100, rel_precision=1e-9, budget_s=3.0)
    samples = sample_until_stable(taker(clock_time, [1.0, 2.0]), options)
    assert samples.stop_reason == "time budget"
    assert samples.device_ms == (1.0, 2.0, 1.0, 2.0, 1.0)  # budget spent after 3, but at least 5
    assert samples.host_ms == (1.5, 2.5, 1.5, 2.5, 1.5)


def test_the_time_budget_stops_as_soon_as_it_is_spent(clock_time):
    options = BenchOptions(min_samples=1000, max_samples=100, rel_precision=1e-9, budget_s=7.0)
    samples = sample_until_stable(taker(clock_time, [1.0, 2.0]), options)
    assert samples.stop_reason == "time budget" and len(samples.device_ms) == 7  # exactly 7 s after 7


def test_time_spent_outside_the_samples_is_not_counted_against_the_budget(clock_time):
    """Each sample costs 1 s of the fake clock, and the defences between samples 2 s more (counted from
    the first call of ``spent_outside``, which may start above zero): the 7 s budget buys 7 samples."""
    options = BenchOptions(min_samples=1000, max_samples=100, rel_precision=1e-9, budget_s=7.0)
    take = taker(clock_time, [1.0, 2.0])
    spent = [5.0]  # what earlier timings left on the same counter

    def sample() -> tuple[float, float]:
        clock_time.now += 2.0
        spent[0] += 2.0
        return take()

    samples = sample_until_stable(sample, options, lambda: spent[0])
    assert samples.stop_reason == "time budget" and len(samples.device_ms) == 7
    # without it, the same sampling stops after 3 (9 s of wall clock), 5 at the earliest
    spent[0] = 5.0
    assert len(sample_until_stable(sample, options).device_ms) == 5


def test_never_more_than_max_samples(clock_time):
    options = BenchOptions(min_samples=10, max_samples=37, rel_precision=1e-9, budget_s=1e9)
    samples = sample_until_stable(taker(clock_time, [1.0, 2.0, 3.0, 0.5]), options)
    assert samples.stop_reason == "max samples"
    assert len(samples.device_ms) == 37 and len(samples.host_ms) == 37


def test_max_samples_wins_over_the_budget_on_the_same_sample(clock_time):
    options = BenchOptions(min_samples=1000, max_samples=6, rel_precision=1e-9, budget_s=6.0)
    samples = sample_until_stable(taker(clock_time, [1.0]), options)
    assert samples.stop_reason == "max samples" and len(samples.device_ms) == 6


def test_precision_is_checked_every_ten_samples_from_min_samples_on(clock_time):
    # Constant samples: the interval is exactly 0, which meets a precision of exactly 0.
    options = BenchOptions(min_samples=15, max_samples=100, rel_precision=0.0, budget_s=1e9)
    samples = sample_until_stable(taker(clock_time, [2.0]), options)
    assert samples.stop_reason == "precision reached" and len(samples.device_ms) == 20


def test_precision_reached_at_min_samples_when_it_is_a_multiple_of_ten(clock_time):
    options = BenchOptions(min_samples=10, max_samples=100, rel_precision=0.0, budget_s=1e9)
    samples = sample_until_stable(taker(clock_time, [2.0]), options)
    assert samples.stop_reason == "precision reached" and len(samples.device_ms) == 10


# -- the summary -----------------------------------------------------------------------------------


def test_summary_of_known_samples():
    samples = Samples(
        device_ms=[4.0, 8.0, 6.0, 2.0, 10.0], host_ms=[5.0, 9.0, 7.0, 3.0, 11.0], stop_reason="r"
    )
    stats = summarize(samples, launches=2, mode="graph", l2="warm", clock="host", warmup=(12, 34.5))
    assert (stats.mode, stats.l2, stats.clock, stats.stop_reason) == ("graph", "warm", "host", "r")
    assert (stats.launches_per_sample, stats.n, stats.warmup_launches, stats.warmup_ms) == (2, 5, 12, 34.5)
    assert stats.samples_ms == (2.0, 4.0, 3.0, 1.0, 5.0)
    assert (stats.median_ms, stats.mean_ms, stats.min_ms, stats.max_ms) == (3.0, 3.0, 1.0, 5.0)
    assert stats.p95_ms == pytest.approx(4.8, rel=1e-12)  # pos 3.8 of 1..5
    assert stats.stddev_ms == pytest.approx(math.sqrt(2.5), rel=1e-12)
    assert stats.cv == pytest.approx(math.sqrt(2.5) / 3.0, rel=1e-12)
    assert stats.median_ci_rel == math.inf  # five samples
    assert stats.host_median_ms == 3.5
    assert stats.note == ""


def test_summary_of_two_samples_below_a_mean_of_one():
    samples = Samples(device_ms=[0.25, 0.75], host_ms=[], stop_reason="r")
    stats = summarize(samples, launches=1, mode="m", l2="l", clock="c", warmup=(1, 2.0), note="n")
    assert stats.stddev_ms == pytest.approx(math.sqrt(0.125), rel=1e-12)
    assert stats.cv == pytest.approx(math.sqrt(0.125) / 0.5, rel=1e-12)
    assert stats.host_median_ms is None and stats.note == "n"


def test_summary_of_one_sample_and_of_a_zero_mean():
    one = summarize(Samples([3.0], [3.5], "r"), launches=1, mode="m", l2="l", clock="c", warmup=(1, 2.0))
    assert one.stddev_ms == 0.0 and one.cv == 0.0 and one.p95_ms == 3.0
    zero = summarize(
        Samples([0.0, 0.0], [0.0, 0.0], "r"), launches=1, mode="m", l2="l", clock="c", warmup=(1, 2.0)
    )
    assert zero.stddev_ms == 0.0 and math.isnan(zero.cv)


def test_the_median_interval_in_the_summary_is_per_launch():
    device = [float(i) for i in range(1, 31)]
    stats = summarize(Samples(device, device, "r"), launches=4, mode="m", l2="l", clock="c", warmup=(1, 2.0))
    assert stats.median_ci_rel == median_ci_rel(device) == (22.0 - 10.0) / (2 * 15.5)


# -- work the events missed ------------------------------------------------------------------------


def _escaped(device: float, host: float, clock: str = "cuda_events") -> str | None:
    samples = Samples([device] * 9, [host] * 9, "r")
    stats = summarize(samples, launches=1, mode="m", l2="l", clock=clock, warmup=(1, 1.0))
    return escaped_work(stats, samples)


def test_escaped_work_threshold_is_a_quarter_of_the_device_time_plus_0_2_ms():
    assert 1.7 - 1.2 == 0.25 * 1.2 + 0.2  # exactly at the threshold: not flagged
    assert _escaped(1.2, 1.7) is None
    assert _escaped(1.0, 1.5) == (
        "host time per sample exceeds the events' by 0.500 ms (events 1.000 ms): work "
        "escaped the timed stream (another stream or thread); synchronize it inside solve"
    )


def test_escaped_work_refuses_host_and_device_samples_of_different_lengths():
    samples = Samples([1.0, 1.0], [5.0, 5.0, 5.0], "r")
    stats = summarize(samples, launches=1, mode="m", l2="l", clock="cuda_events", warmup=(1, 1.0))
    with pytest.raises(ValueError):
        escaped_work(stats, samples)


# -- warm-up and the spin hold ---------------------------------------------------------------------


def test_warm_up_runs_at_least_three_launches(clock_time):
    clock = RecordingClock()
    launches, ms = warm_up(clock, launcher(clock_time, clock, [U] * 50), warmup_ms=0.0)
    assert launches == 3 and ms == 3 * U * 1e3
    assert clock.syncs == [3]


def test_warm_up_runs_until_its_time_has_passed_syncing_every_eight(clock_time):
    clock = RecordingClock()
    step = 2.0**-10  # 0.9765625 ms
    launches, ms = warm_up(clock, launcher(clock_time, clock, [step] * 50), warmup_ms=10.0)
    assert launches == 11 and ms == 11 * 0.9765625
    assert clock.syncs == [8, 11]


def test_warm_up_stops_once_the_time_is_reached_exactly(clock_time):
    clock = RecordingClock()
    step = 2.0**-10
    launches, _ = warm_up(clock, launcher(clock_time, clock, [step] * 50), warmup_ms=8 * 0.9765625)
    assert launches == 8


def test_warm_up_measures_in_milliseconds(clock_time):
    clock = RecordingClock()
    step = 2.0**-10
    launches, _ = warm_up(clock, launcher(clock_time, clock, [step] * 50), warmup_ms=7.82)
    assert launches == 9  # 8 launches are 7.8125 ms, just short


def test_warm_up_honours_a_larger_minimum(clock_time):
    clock = RecordingClock()
    launches, _ = warm_up(clock, launcher(clock_time, clock, [U] * 50), warmup_ms=0.0, min_launches=17)
    assert launches == 17 and clock.syncs == [8, 16, 17]


def test_spin_hold_is_twice_the_median_enqueue_time(clock_time):
    clock = RecordingClock()
    fn = launcher(clock_time, clock, [U, 2 * U, 3 * U, 4 * U, 100 * U, 1.0])
    hold = spin_for(clock, fn)
    assert hold == 2 * 3 * U * 1e6  # 91.55 us from the median of five tries
    assert clock.held == [hold] and clock.calls == 5
    assert clock.syncs == [0, 1, 2, 3, 4, 5]  # before each try, and after the last


def test_spin_hold_is_clamped(clock_time):
    clock = RecordingClock()
    assert spin_for(clock, launcher(clock_time, clock, [U] * 5)) == MIN_SPIN_US
    assert clock.held == [MIN_SPIN_US]
    clock = RecordingClock()
    assert spin_for(clock, launcher(clock_time, clock, [1.0] * 3), tries=3) == MAX_SPIN_US
    assert clock.calls == 3


# -- the clocks ------------------------------------------------------------------------------------


def test_host_clock_times_in_milliseconds(clock_time):
    clock = HostClock()
    assert clock.time(lambda: setattr(clock_time, "now", clock_time.now + 0.25)) == (250.0, 250.0)


class FakeEvent:
    created: list[dict] = []

    def __init__(self, fake: FakeTime, **kwargs) -> None:
        FakeEvent.created.append(kwargs)
        self.fake = fake
        self.at = math.nan  # until recorded

    def record(self) -> None:
        self.at = self.fake.now

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3


@pytest.fixture
def fake_cuda(monkeypatch, clock_time):
    """torch.cuda with events on the fake clock; _sleep advances it by its cycles at 2 GHz, and a
    synchronize after the timed region finds 0.5 ms of work the events did not see."""
    log: dict[str, list] = {"sleep": [], "sync": []}
    FakeEvent.created = []

    def sleep(cycles: int) -> None:
        assert isinstance(cycles, int)
        log["sleep"].append(cycles)
        clock_time.now += cycles / 2e9

    def synchronize() -> None:
        log["sync"].append(clock_time.now)
        if len(log["sync"]) % 2 == 0:
            clock_time.now += 2.0**-11  # 0.48828125 ms escaped onto another stream

    monkeypatch.setattr(torch.cuda, "Event", lambda **kw: FakeEvent(clock_time, **kw))
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda, "_sleep", sleep, raising=False)
    return log


def test_cuda_event_clock_times_the_region_and_the_host_less_the_spin(fake_cuda, clock_time):
    clock = CudaEventClock()
    assert clock._torch is torch
    assert FakeEvent.created == [{"enable_timing": True}] * 3
    clock.hold(2**-4 * 1e6 / 2000)  # a spin of 2**-4 * 1e6 cycles: 31.25 us at 2 GHz
    assert clock.spin_cycles == 62500
    device, host = clock.time(lambda: setattr(clock_time, "now", clock_time.now + 2.0**-9))
    assert fake_cuda["sleep"] == [62500]
    assert device == pytest.approx(2.0**-9 * 1e3, rel=1e-12)  # 1.953125 ms
    assert host == pytest.approx((2.0**-9 + 2.0**-11) * 1e3, rel=1e-9)  # the escaped 0.488 ms, no spin


def test_cuda_event_clock_hold_rounds_down_at_2_ghz(fake_cuda):
    clock = CudaEventClock()
    clock.hold(0.7)
    assert clock.spin_cycles == 1400
    clock.hold(MIN_SPIN_US)
    assert clock.spin_cycles == 100_000

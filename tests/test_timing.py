"""The sampling rule and statistics, on synthetic samples (the clocks themselves are exercised by the
harness tests on the CPU and by the GPU tests; tests/bench/test_timing_mutants.py has the exact answers on
a fake clock)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from kopt_core.bench.timing import Samples, escaped_work, median_ci_rel, sample_until_stable, summarize
from kopt_core.records import BenchOptions


def test_median_interval_shrinks_with_more_and_tighter_samples():
    rng = random.Random(1)
    wide = [1.0 + rng.gauss(0, 0.05) for _ in range(50)]
    tight = [1.0 + rng.gauss(0, 0.001) for _ in range(50)]
    many = [1.0 + rng.gauss(0, 0.05) for _ in range(2000)]
    assert median_ci_rel(tight) < median_ci_rel(wide)
    assert median_ci_rel(many) < median_ci_rel(wide)
    assert median_ci_rel([1.0] * 5) == math.inf  # too few to say anything
    assert median_ci_rel([2.0] * 40) == 0.0


def _source(values):
    it = itertools.cycle(values)

    def take():
        device = next(it)
        return device, device + 0.01

    return take


def test_sampling_stops_when_precise_enough():
    options = BenchOptions(min_samples=30, max_samples=1000, rel_precision=0.005, budget_s=60)
    samples = sample_until_stable(_source([1.0, 1.001, 0.999, 1.0005]), options)
    assert samples.stop_reason == "precision reached"
    assert len(samples.device_ms) == 30 and len(samples.host_ms) == 30


def test_sampling_stops_at_the_sample_cap_when_noise_never_settles():
    options = BenchOptions(min_samples=10, max_samples=200, rel_precision=1e-6, budget_s=60)
    assert sample_until_stable(_source([1.0, 2.0, 3.0, 0.5]), options).stop_reason == "max samples"


def test_sampling_stops_at_the_time_budget():
    options = BenchOptions(min_samples=1000, max_samples=10**9, rel_precision=1e-9, budget_s=0.05)
    samples = sample_until_stable(_source([1.0, 2.0]), options)
    assert samples.stop_reason == "time budget" and len(samples.device_ms) >= 5


def test_summary_reports_per_launch_figures():
    samples = Samples(
        device_ms=[10.0, 12.0, 11.0, 30.0], host_ms=[10.5, 12.5, 11.5, 30.5], stop_reason="time budget"
    )
    stats = summarize(samples, launches=10, mode="graph", l2="cold", clock="cuda_events", warmup=(100, 200.0))
    assert stats.median_ms == 1.15 and stats.min_ms == 1.0 and stats.max_ms == 3.0
    assert stats.samples_ms == (1.0, 1.2, 1.1, 3.0)
    assert stats.host_median_ms == 1.2
    # Position 3 * 0.95 = 2.85 in (1.0, 1.1, 1.2, 3.0): 1.2 + 0.85 * (3.0 - 1.2). An index off by one gives
    # 3.0 (or 1.2 + 0.95 * 1.8), which the old window 2.0 < p95 <= 3.0 let through.
    assert stats.p95_ms == pytest.approx(2.73, rel=1e-12)
    assert stats.cv > 0


def test_work_hidden_from_the_events_is_detected():
    base = dict(launches=1, mode="per_launch", l2="cold", warmup=(1, 1.0))

    def samples(device, host):
        return Samples(device_ms=[device] * 20, host_ms=[host] * 20, stop_reason="x")

    honest = samples(1.0, 1.05)
    assert escaped_work(summarize(honest, clock="cuda_events", **base), honest) is None
    hidden = samples(0.01, 3.0)
    assert "escaped" in escaped_work(summarize(hidden, clock="cuda_events", **base), hidden)
    host_clock = summarize(samples(1.0, 1.0), clock="host", **base)
    assert escaped_work(host_clock, samples(1.0, 9.0)) is None

"""Timing primitives: clocks, warm-up by time, sampling until the median is stable, statistics.

A *sample* is one timed region that runs ``launches`` launches; every figure reported is per launch.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Protocol

from attrs import field, frozen

from kopt_core.records import BenchOptions, TimingStats
from kopt_core.records.fields import as_tuple

Fn = Callable[[], object]


MIN_SPIN_US = 50.0
MAX_SPIN_US = 20_000.0


class Clock(Protocol):
    name: str

    def sync(self) -> None: ...

    def hold(self, microseconds: float) -> None:
        """How long the stream is held before the start event (device clocks); a no-op on the host."""

    def time(self, fn: Fn) -> tuple[float, float]:
        """Run ``fn`` once; return (device milliseconds, host wall milliseconds including a device sync)."""


class HostClock:
    """For backends that run on the CPU: wall time is the time."""

    name = "host"

    def hold(self, microseconds: float) -> None:
        return None

    def sync(self) -> None:
        return None

    def time(self, fn: Fn) -> tuple[float, float]:
        start = time.perf_counter()
        fn()
        elapsed = (time.perf_counter() - start) * 1e3
        return elapsed, elapsed


class CudaEventClock:
    """PyTorch's CUDA events around the region on its current stream (for references and backends that
    launch through PyTorch). A short sleep kernel goes first, so that the start event does not run ahead
    of launches the host is still making. The host time runs to a full device synchronize, so work that
    escaped onto another stream shows up there even when the events miss it."""

    name = "cuda_events"
    spin_cycles = 100_000  # about 50 us at 2 GHz

    def hold(self, microseconds: float) -> None:
        self.spin_cycles = int(microseconds * 2000)  # at most 2 GHz: never shorter than asked

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._before = torch.cuda.Event(enable_timing=True)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def sync(self) -> None:
        self._torch.cuda.synchronize()

    def time(self, fn: Fn) -> tuple[float, float]:
        torch = self._torch
        torch.cuda.synchronize()
        host_start = time.perf_counter()
        self._before.record()
        if hasattr(torch.cuda, "_sleep"):  # PyTorch's own spin kernel (private, long-standing)
            torch.cuda._sleep(self.spin_cycles)
        self._start.record()
        fn()
        self._end.record()
        torch.cuda.synchronize()
        # The host's time less the sleep, as the device measured it (its length in cycles varies with
        # the clock): what remains beyond the events is work the events did not see.
        host = (time.perf_counter() - host_start) * 1e3 - self._before.elapsed_time(self._start)
        return self._start.elapsed_time(self._end), host


def warm_up(clock: Clock, fn: Fn, warmup_ms: float, min_launches: int = 3) -> tuple[int, float]:
    """Run ``fn`` until ``warmup_ms`` of wall time has passed (clocks settle, caches and modules load)."""
    launches = 0
    start = time.perf_counter()
    while launches < min_launches or (time.perf_counter() - start) * 1e3 < warmup_ms:
        fn()
        launches += 1
        if launches % 8 == 0:
            clock.sync()
    clock.sync()
    return launches, (time.perf_counter() - start) * 1e3


def spin_for(clock: Clock, fn: Fn, tries: int = 5) -> float:
    """Set how long the clock holds the stream before its start event: twice the host's time to enqueue
    ``fn`` (the ctypes call, a library's own setup such as CUTLASS's initialize()), at least MIN_SPIN_US,
    so that the events time the GPU's work and not the host's. Returns the hold in microseconds."""
    enqueue = []
    for _ in range(tries):
        clock.sync()
        start = time.perf_counter()
        fn()
        enqueue.append((time.perf_counter() - start) * 1e6)
    clock.sync()
    hold = min(MAX_SPIN_US, max(MIN_SPIN_US, 2 * statistics.median(enqueue)))
    clock.hold(hold)
    return hold


def median_ci_rel(samples: list[float]) -> float:
    """Half-width of a distribution-free 95% interval of the median, relative to the median.

    Uses the order statistics at n/2 -+ 1.96*sqrt(n)/2 (no assumption about the shape of the noise,
    which for GPU timings is skewed and heavy-tailed)."""
    n = len(samples)
    if n < 6:
        return math.inf
    ordered = sorted(samples)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    med = statistics.median(ordered)
    if med <= 0:
        return math.inf
    return (ordered[hi] - ordered[lo]) / (2 * med)


@frozen
class Samples:
    """What one sampling took: device and host milliseconds per sample (a sample may hold several
    launches), and why the sampling stopped."""

    device_ms: tuple[float, ...] = field(converter=as_tuple)
    host_ms: tuple[float, ...] = field(converter=as_tuple)
    stop_reason: str


def sample_until_stable(
    take: Callable[[], tuple[float, float]],
    options: BenchOptions,
    spent_outside: Callable[[], float] | None = None,
) -> Samples:
    """Take samples until the median's interval is within ``rel_precision``, or the time budget or the
    sample cap runs out. ``spent_outside()`` is the seconds spent so far between samples on something
    else (fresh inputs, audits), which the budget does not count."""
    device: list[float] = []
    host: list[float] = []
    start = time.perf_counter()
    outside = spent_outside or (lambda: 0.0)
    already = outside()
    check_every = 10
    while True:
        d, h = take()
        device.append(d)
        host.append(h)
        n = len(device)
        if n >= options.max_samples:
            return Samples(device, host, "max samples")
        if (
            n >= options.min_samples
            and n % check_every == 0
            and median_ci_rel(device) <= options.rel_precision
        ):
            return Samples(device, host, "precision reached")
        if time.perf_counter() - start - (outside() - already) >= options.budget_s and n >= 5:
            return Samples(device, host, "time budget")


def percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(
    samples: Samples,
    *,
    launches: int,
    mode: str,
    l2: str,
    clock: str,
    warmup: tuple[int, float],
    note: str = "",
) -> TimingStats:
    """Per-launch statistics of ``samples`` (``launches`` launches per sample), labelled with how they were
    taken."""
    per = [d / launches for d in samples.device_ms]
    ordered = sorted(per)
    mean = statistics.fmean(per)
    stddev = statistics.stdev(per) if len(per) > 1 else 0.0
    host_per = statistics.median(samples.host_ms) / launches if samples.host_ms else None
    return TimingStats(
        mode=mode,
        l2=l2,
        clock=clock,
        launches_per_sample=launches,
        n=len(per),
        median_ms=statistics.median(per),
        p95_ms=percentile(ordered, 0.95),
        mean_ms=mean,
        min_ms=ordered[0],
        max_ms=ordered[-1],
        stddev_ms=stddev,
        cv=stddev / mean if mean > 0 else math.nan,
        median_ci_rel=median_ci_rel(per),
        stop_reason=samples.stop_reason,
        warmup_launches=warmup[0],
        warmup_ms=warmup[1],
        host_median_ms=host_per,
        samples_ms=tuple(per),
        note=note,
    )


def escaped_work(stats: TimingStats, samples: Samples) -> str | None:
    """Say so when the host saw much more time than the events did: work ran where the events could
    not see it (another stream, another thread)."""
    if stats.clock != "cuda_events" or not samples.host_ms:
        return None
    gap = statistics.median(h - d for h, d in zip(samples.host_ms, samples.device_ms, strict=True))
    device = statistics.median(samples.device_ms)
    if gap > 0.25 * device + 0.2:
        return (
            f"host time per sample exceeds the events' by {gap:.3f} ms (events {device:.3f} ms): work "
            "escaped the timed stream (another stream or thread); synchronize it inside solve"
        )
    return None

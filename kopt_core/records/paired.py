"""A paired A/B comparison of two kernels: the blocks the worker timed, the GPU telemetry around them, and
the decision drawn from them (paired.json).

Side A is the incumbent (the current best), side B the challenger. The two are timed in one worker process
on the same buffers, in blocks run back to back; within a block one side runs all its samples, then the
other, in the order the block's ``order`` says. The statistics live in ``kopt_core.bench.paired``.
"""

from __future__ import annotations

import os

from attrs import field, frozen

from kopt_core.records.bench import Defences
from kopt_core.records.fields import as_tuple
from kopt_core.records.versions import PAIRED_SCHEMA_VERSION, read_document


@frozen
class TelemetrySample:
    """One NVML reading of the GPU. A reading NVML could not give is None (unknown), never zero."""

    at_s: float  # time.perf_counter() when sampled
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    # Compute processes on this GPU other than ours. Inside a container NVML may report host process ids,
    # so our own process can count here too: compare counts between samples, not with zero.
    other_processes: int | None = None
    throttle_reasons: int | None = None  # NVML clocks-event reasons bitmask (0 = none)
    sample_ms: float | None = None  # how long the reading took (it must stay well under 1 ms)


@frozen
class PairedBlock:
    """One block: both sides timed back to back, in the order ``order`` names."""

    index: int
    order: str  # "AB" or "BA": which side ran first in this block
    a_ms: float  # the block's median per-launch time of side A
    b_ms: float
    a_samples: tuple[float, ...] = field(default=(), converter=as_tuple)
    b_samples: tuple[float, ...] = field(default=(), converter=as_tuple)
    telemetry: tuple[TelemetrySample, ...] = field(default=(), converter=as_tuple)  # before and after
    voided: bool = False  # left out of the decision: the block ran outside a stable window
    void_reason: str = ""


@frozen
class PairedMeasurement:
    """What the worker returns for one A/B pairing (an A/A pairing has the same label on both sides)."""

    a: str  # label of side A (the incumbent: current best), e.g. its kernel path
    b: str  # label of side B (the challenger)
    status: str = "ok"  # ok | failed | error (as in BenchResult)
    error: str | None = None
    error_stage: str | None = None
    failed_side: str | None = None  # "a" | "b" | None
    violation: str | None = None  # why the failed side failed (records.bench.VIOLATIONS)
    mode: str = ""  # per_launch | graph | batched (how a block's samples were taken)
    l2: str = ""
    seed: int = 0  # the seed of the block order
    blocks: tuple[PairedBlock, ...] = field(default=(), converter=as_tuple)
    telemetry_available: bool = False
    telemetry_note: str = ""  # why not, when not
    defences: dict[str, Defences] = field(factory=dict)  # by side ("a", "b")
    worker_seconds: float = 0.0
    schema_version: int = PAIRED_SCHEMA_VERSION


@frozen
class PairedComparison:
    """The decision on one pairing: paired.json. ``measurement`` holds the blocks with the voided ones
    marked, so the file shows which blocks the interval was drawn from and why the others were not."""

    a: str
    b: str
    verdict: str  # faster | not_faster | slower | invalid (B compared with A)
    speedup: float | None  # point estimate of a_ms / b_ms (>1: B is faster)
    ci_low: float | None
    ci_high: float | None
    confidence: float = 0.95
    threshold: float = 0.0  # relative noise threshold the lower bound had to clear
    blocks_used: int = 0
    blocks_voided: int = 0
    reasons: tuple[str, ...] = field(default=(), converter=as_tuple)
    measurement: PairedMeasurement | None = None
    schema_version: int = PAIRED_SCHEMA_VERSION


@frozen
class AblationEffect:
    """What one method is worth, from a pairing of the champion (A) with the champion without the method
    (B). ``delta_ms`` is ms_without_method - ms_champion (positive: the method saves time); ``slowdown`` is
    b/a - 1, the relative time the champion would lose without the method. The effect is beyond noise when
    the lower bound of ``slowdown`` exceeds ``threshold``."""

    a: str  # the champion
    b: str  # the champion without the method
    verdict: str  # beyond_noise | within_noise | invalid
    beyond_noise: bool
    delta_ms: float | None
    delta_low_ms: float | None
    delta_high_ms: float | None
    slowdown: float | None
    slowdown_low: float | None
    slowdown_high: float | None
    confidence: float = 0.95
    threshold: float = 0.0
    blocks_used: int = 0
    blocks_voided: int = 0
    reasons: tuple[str, ...] = field(default=(), converter=as_tuple)


def read_paired_comparison(path: str | os.PathLike[str]) -> PairedComparison:
    """A paired.json; OSError or ValueError when it cannot be read as one."""
    return read_document(path, PairedComparison, "paired")

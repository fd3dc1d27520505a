"""The statistics of a paired A/B comparison: the block order, voiding blocks run outside a stable window,
bootstrap intervals, the decision, the noise threshold from an A/A pairing, and ablation attribution.

Why paired blocks: two medians taken at different moments differ by whatever changed between them
(clocks, temperature, neighbours; docs/measurement.md). Within one block the two sides run back to back,
so what changes slowly is shared by both and cancels in the block's ratio a_ms / b_ms. The blocks'
orders are balanced (as many AB as BA), so an effect of running first or second cancels too.

The estimator: the speedup is the median over usable blocks of the per-block ratio a_ms / b_ms (taken in
log space, so that a/b and b/a give reciprocal answers), and its interval is a percentile bootstrap that
resamples whole blocks with replacement. The block is the unit of independence: samples inside a block
share its clock and temperature, so resampling samples would pretend to a precision the data does not
have. The median rather than the mean, because a block hit by a hiccup that telemetry missed (a
preemption, a neighbour's burst) gives one wild ratio, and one wild block must not decide a promotion.

Everything here is pure and deterministic given its seed; the worker that times the blocks imports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt

from kopt_core.bench.telemetry import SLOWDOWN_MASK, slowdown_names
from kopt_core.records.paired import AblationEffect, PairedBlock, PairedComparison, PairedMeasurement

# A block is voided when its SM clock readings (taken before and after it) differ by more than this,
# relative to the higher: the clock moved while the block ran, so its two sides may have run at different
# clocks. A clock that differs from other blocks' but holds through the block is shared by both sides and
# cancels in the block's ratio; that is what pairing is for, so the pairing's median clock is no yardstick.
# It would be a wrong one besides: NVML refreshes its clock reading about every 100 ms, not per block, and
# under the power cap a CUTLASS GEMM's reading stepped once per pairing (1455 to 1815 MHz, 1635 to 1965)
# while the times on both sides of the step agreed within 0.5% (tests/fixtures/h200/paired/, captured
# 2026-12-01): judged against the median, the blocks on the minority side of the step were voided for
# nothing (9, 10 and 7 of 20; all 20 in a pairing whose readings split evenly, the median between them).
# Under steady load the H200 holds 1980 MHz and idles at 345 MHz, so a block that began from idle, or met a
# drop the reading caught, moves far more than 3%; boost jitter of a clock step or two stays inside it.
CLOCK_TOLERANCE = 0.03

# Fewest usable blocks for a decision. A percentile bootstrap of a median over few blocks can only pick
# among a handful of order statistics, and it runs narrow: on identical kernels its 95% interval misses 1
# on each side about 3-4% of the time for 10 to 40 blocks (nominally 2.5%), and more below 10 (simulated;
# tests/bench/test_paired.py holds it there). The noise threshold, never below NOISE_FLOOR, is the margin
# that covers the difference. Ask the worker for 20 or more blocks, so that a few voided ones leave enough.
MIN_BLOCKS = 10

# The smallest relative effect kopt ever calls real. Medians of the same stable kernel in separate
# processes on the H200 spread by 0.03-0.3% (MEASUREMENT.md); a floor of 0.5% sits above that and below
# the gains worth a promotion, so an A/A pairing that came out unusually tight cannot let a 0.2% "win"
# through.
NOISE_FLOOR = 0.005

RESAMPLES = 10_000

# resampled values held at once, so that many blocks do not take much memory
_CHUNK_VALUES = 2_000_000

FloatArray = npt.NDArray[np.float64]


def block_order(blocks: int, seed: int) -> tuple[str, ...]:
    """Which side runs first in each block: "AB" or "BA".

    Blocks come in consecutive pairs, each pair AB BA or BA AB by a seeded coin, so the counts are equal
    for an even number of blocks (one apart for an odd one), no order runs more than twice in a row, and a
    slow drift across the pairing falls on both orders alike. The same seed gives the same order."""
    if blocks < 2:
        raise ValueError(f"a paired comparison needs at least 2 blocks (got {blocks})")
    flips = np.random.default_rng(seed).integers(0, 2, size=(blocks + 1) // 2)
    order: list[str] = []
    for flip in flips:
        order += ["AB", "BA"] if flip else ["BA", "AB"]
    return tuple(order[:blocks])


def void_unstable(
    blocks: Sequence[PairedBlock],
    *,
    clock_tolerance: float = CLOCK_TOLERANCE,
    slowdown_mask: int = SLOWDOWN_MASK,
) -> tuple[PairedBlock, ...]:
    """The blocks, with those that ran outside a stable window marked voided and the reason given.

    A block is voided when
    - a time is not finite and positive (nothing else can be read from it);
    - its SM clock readings differ by more than ``clock_tolerance``, relative to the highest: the clock
      moved while it ran (``CLOCK_TOLERANCE`` says why not the pairing's median);
    - any reading has a clocks-event reason in ``slowdown_mask`` set (thermal, power brake, hardware
      slowdown; ``telemetry.SLOWDOWN_REASONS``). The power cap alone is not one: under it the clock is
      judged by the clock rule above (``telemetry.POWER_CAP`` says why);
    - any reading counts more other compute processes than the quietest reading of the pairing: a process
      appeared while the block ran. A process present all along is shared by every block and is not held
      against any (inside a container NVML may even count our own process, under its host id).
    A reading that is None says nothing, and a block without telemetry is not voided for telemetry. A
    block the worker already voided stays voided with its reason."""
    counts = [s.other_processes for b in blocks for s in b.telemetry if s.other_processes is not None]
    quietest = min(counts) if counts else None
    out = []
    for block in blocks:
        reasons = [block.void_reason or "voided by the worker"] if block.voided else []
        found = _void_reasons(block, clock_tolerance, slowdown_mask, quietest)
        reasons += [r for r in found if r not in block.void_reason]  # voiding twice adds nothing
        out.append(attrs.evolve(block, voided=True, void_reason="; ".join(reasons)) if reasons else block)
    return tuple(out)


def _void_reasons(block: PairedBlock, tolerance: float, mask: int, quietest: int | None) -> list[str]:
    reasons = []
    if not (_positive(block.a_ms) and _positive(block.b_ms)):
        reasons.append(f"time not finite and positive (a {block.a_ms} ms, b {block.b_ms} ms)")
    clocks = _clocks(block)
    if clocks and max(clocks) > 0:
        moved = (max(clocks) - min(clocks)) / max(clocks)
        if moved > tolerance:
            readings = ", ".join(f"{clock:.0f}" for clock in clocks)
            reasons.append(
                f"SM clock moved {moved:.1%} while the block ran (readings {readings} MHz; "
                f"tolerance {tolerance:.1%})"
            )
    slowdown = 0
    for sample in block.telemetry:
        if sample.throttle_reasons is not None:
            slowdown |= sample.throttle_reasons & mask
    if slowdown:
        names = ", ".join(slowdown_names(slowdown)) or "unnamed"
        reasons.append(f"the GPU slowed itself down: clocks-event reasons {names} (0x{slowdown:x})")
    if quietest is not None:
        most = max(
            (s.other_processes for s in block.telemetry if s.other_processes is not None), default=None
        )
        if most is not None and most > quietest:
            reasons.append(
                f"{most} other compute process(es) on the GPU, {most - quietest} more than at the quietest "
                "reading: another process started while the block ran"
            )
    return reasons


def bootstrap_ratio_ci(
    a_ms: Sequence[float],
    b_ms: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(speedup, low, high): the median over blocks of a_ms / b_ms (>1: B is faster) and its percentile
    bootstrap interval, resampling blocks with replacement. Computed on log ratios, so swapping A and B
    gives exactly the reciprocal answer. Times must be finite and positive (``void_unstable`` leaves out
    those that are not)."""
    a, b = _paired_arrays(a_ms, b_ms)
    if not (np.all(np.isfinite(a) & (a > 0)) and np.all(np.isfinite(b) & (b > 0))):
        raise ValueError("every time must be finite and positive for a ratio")
    point, low, high = _bootstrap_median(np.log(a / b), confidence, resamples, seed)
    return math.exp(point), math.exp(low), math.exp(high)


def bootstrap_difference_ci(
    a_ms: Sequence[float],
    b_ms: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(difference, low, high) in milliseconds: the median over blocks of b_ms - a_ms (>0: B is slower)
    and its percentile bootstrap interval, resampling blocks as ``bootstrap_ratio_ci`` does (with the same
    seed and the same number of blocks, the same resamples)."""
    a, b = _paired_arrays(a_ms, b_ms)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("every time must be finite for a difference")
    return _bootstrap_median(b - a, confidence, resamples, seed)


def _paired_arrays(a_ms: Sequence[float], b_ms: Sequence[float]) -> tuple[FloatArray, FloatArray]:
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"a_ms and b_ms must be paired: one time of each per block ({a.shape} vs {b.shape})")
    if len(a) < 2:
        raise ValueError(f"a bootstrap needs at least 2 blocks (got {len(a)})")
    return a, b


def _bootstrap_median(
    values: FloatArray, confidence: float, resamples: int, seed: int
) -> tuple[float, float, float]:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie between 0 and 1 (got {confidence})")
    if resamples < 100:
        raise ValueError(f"a percentile interval needs at least 100 resamples (got {resamples})")
    n = len(values)
    rng = np.random.default_rng(seed)
    medians = np.empty(resamples)
    chunk = max(1, _CHUNK_VALUES // n)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        medians[start : start + size] = np.median(values[rng.integers(0, n, size=(size, n))], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(medians, [tail, 1 - tail])
    return float(np.median(values)), float(low), float(high)


@attrs.frozen
class _Usable:
    """The blocks after voiding, and what a decision needs to know about them."""

    blocks: tuple[PairedBlock, ...]
    used: tuple[PairedBlock, ...]
    voided: int
    reasons: tuple[str, ...]  # why blocks were voided, and notes on what remains
    invalid: str | None  # why no decision can be drawn, when none can


def _usable(measurement: PairedMeasurement, min_blocks: int, clock_tolerance: float) -> _Usable:
    if min_blocks < 2:
        raise ValueError(f"min_blocks must be at least 2 (got {min_blocks})")
    if measurement.status != "ok":
        side = f" (side {measurement.failed_side})" if measurement.failed_side else ""
        stage = f" at {measurement.error_stage}" if measurement.error_stage else ""
        why = f"the measurement {measurement.status}{side}{stage}: {measurement.error or 'no error given'}"
        return _Usable(measurement.blocks, (), 0, (), why)
    blocks = void_unstable(measurement.blocks, clock_tolerance=clock_tolerance)
    used = tuple(b for b in blocks if not b.voided)
    voided = [b for b in blocks if b.voided]
    reasons = []
    if voided:
        shown = "; ".join(f"block {b.index}: {b.void_reason}" for b in voided[:5])
        more = f"; and {len(voided) - 5} more" if len(voided) > 5 else ""
        reasons.append(f"voided {len(voided)} of {len(blocks)} blocks: {shown}{more}")
    if not measurement.telemetry_available:
        note = f" ({measurement.telemetry_note})" if measurement.telemetry_note else ""
        reasons.append(f"no GPU telemetry{note}: no block could be voided for clocks or neighbours")
    first_a = sum(1 for b in used if b.order == "AB")
    first_b = len(used) - first_a
    if abs(first_a - first_b) > max(1, len(used) // 4):
        reasons.append(
            f"order balance lost after voiding ({first_a} AB vs {first_b} BA blocks): an effect of "
            "running first or second no longer cancels"
        )
    invalid = None
    if len(used) < min_blocks:
        invalid = f"only {len(used)} usable block(s) of {len(blocks)}; a decision needs {min_blocks}"
    return _Usable(blocks, used, len(voided), tuple(reasons), invalid)


def decide(
    measurement: PairedMeasurement,
    threshold: float,
    *,
    confidence: float = 0.95,
    seed: int = 0,
    min_blocks: int = MIN_BLOCKS,
    resamples: int = RESAMPLES,
    clock_tolerance: float = CLOCK_TOLERANCE,
) -> PairedComparison:
    """Whether B (the challenger) is faster than A (the incumbent), from one paired measurement.

    Unstable blocks are voided first (``void_unstable``). The verdict is "invalid" when the measurement
    failed or fewer than ``min_blocks`` usable blocks remain; otherwise, with [low, high] the
    ``confidence`` bootstrap interval of the speedup a/b and ``threshold`` relative (0.01 = 1%, usually
    ``noise_threshold`` of the run's A/A pairing): "faster" only when low > 1 + threshold, "slower" when
    high < 1 - threshold, and "not_faster" otherwise. The returned comparison carries the measurement
    with its voided blocks marked."""
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite relative effect >= 0 (got {threshold})")
    usable = _usable(measurement, min_blocks, clock_tolerance)
    speedup = low = high = None
    if usable.invalid is not None:
        verdict, reasons = "invalid", (usable.invalid, *usable.reasons)
    else:
        speedup, low, high = bootstrap_ratio_ci(
            [b.a_ms for b in usable.used],
            [b.b_ms for b in usable.used],
            confidence=confidence,
            resamples=resamples,
            seed=seed,
        )
        verdict, why = _verdict(low, high, threshold, confidence)
        reasons = (why, *usable.reasons)
    return PairedComparison(
        a=measurement.a,
        b=measurement.b,
        verdict=verdict,
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        threshold=threshold,
        blocks_used=len(usable.used),
        blocks_voided=usable.voided,
        reasons=reasons,
        measurement=attrs.evolve(measurement, blocks=usable.blocks),
    )


def _verdict(low: float, high: float, threshold: float, confidence: float) -> tuple[str, str]:
    interval = f"the {confidence:.0%} interval of a/b [{low:.4f}, {high:.4f}]"
    if low > 1 + threshold:
        return "faster", f"B is faster: {interval} lies above 1 + threshold ({1 + threshold:.4f})"
    if high < 1 - threshold:
        return "slower", f"B is slower: {interval} lies below 1 - threshold ({1 - threshold:.4f})"
    return "not_faster", f"no clear difference: {interval} does not clear 1 +- threshold ({threshold:.2%})"


def noise_threshold(
    aa: PairedComparison | PairedMeasurement,
    *,
    floor: float = NOISE_FLOOR,
    confidence: float = 0.95,
    seed: int = 0,
    min_blocks: int = MIN_BLOCKS,
) -> float:
    """The run's noise threshold: the smallest relative effect a paired comparison may call real, from an
    A/A pairing of the baseline with itself (a measurement is decided first, with threshold 0).

    The rule: max(1 - low, high - 1) of the A/A interval of a/b, and never below ``floor``. The A/A
    interval holds both the scatter of the blocks and any bias that pairing itself brings (the same
    kernel timed as A and as B should give 1; an interval off 1 shows an effect of the side, not of the
    kernel), so a challenger must beat by more than both. This counts the scatter twice, once here and
    once in the A/B interval: deliberately, since a wrong "faster" is the worst answer kopt can give.

    An A/A pairing that is itself invalid (failed, or too few usable blocks) gives no threshold: ValueError
    with the reasons, which kopt turns into a stop rather than deciding against an unknown noise."""
    if not (math.isfinite(floor) and floor >= 0):
        raise ValueError(f"floor must be a finite relative effect >= 0 (got {floor})")
    if isinstance(aa, PairedMeasurement):
        aa = decide(aa, 0.0, confidence=confidence, seed=seed, min_blocks=min_blocks)
    if aa.verdict == "invalid" or aa.ci_low is None or aa.ci_high is None:
        why = "; ".join(aa.reasons) or "no interval"
        raise ValueError(
            f"the A/A pairing of the baseline with itself is invalid, so the noise is unknown: {why}"
        )
    if not (math.isfinite(aa.ci_low) and math.isfinite(aa.ci_high)):
        raise ValueError(f"the A/A pairing's interval is not finite ([{aa.ci_low}, {aa.ci_high}])")
    return max(floor, 1 - aa.ci_low, aa.ci_high - 1)


def attribution(
    measurement: PairedMeasurement,
    threshold: float,
    *,
    confidence: float = 0.95,
    seed: int = 0,
    min_blocks: int = MIN_BLOCKS,
    resamples: int = RESAMPLES,
    clock_tolerance: float = CLOCK_TOLERANCE,
) -> AblationEffect:
    """What one method is worth, from a pairing with A = the champion and B = the champion without the
    method: the time the method saves (b_ms - a_ms per block, median and interval, in ms) and the relative
    slowdown without it (b/a - 1). The method's effect is beyond noise when the slowdown's lower bound
    exceeds ``threshold``: the same bar a challenger must clear to be called faster, with the roles
    swapped. Voiding and the "invalid" rule are those of ``decide``."""
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite relative effect >= 0 (got {threshold})")
    usable = _usable(measurement, min_blocks, clock_tolerance)
    delta = delta_low = delta_high = slowdown = slowdown_low = slowdown_high = None
    beyond = False
    if usable.invalid is not None:
        verdict, reasons = "invalid", (usable.invalid, *usable.reasons)
    else:
        a = [b.a_ms for b in usable.used]
        b = [b.b_ms for b in usable.used]
        delta, delta_low, delta_high = bootstrap_difference_ci(
            a, b, confidence=confidence, resamples=resamples, seed=seed
        )
        speedup, low, high = bootstrap_ratio_ci(a, b, confidence=confidence, resamples=resamples, seed=seed)
        # a/b's interval inverts exactly into b/a's (log space): the slowdown's lower bound is 1/high - 1
        slowdown, slowdown_low, slowdown_high = 1 / speedup - 1, 1 / high - 1, 1 / low - 1
        beyond = slowdown_low > threshold
        interval = f"the {confidence:.0%} interval of the slowdown without the method [{slowdown_low:+.2%}, "
        interval += f"{slowdown_high:+.2%}]"
        if beyond:
            verdict, why = (
                "beyond_noise",
                f"beyond noise: {interval} lies above the threshold {threshold:.2%}",
            )
        else:
            verdict, why = (
                "within_noise",
                f"within noise: {interval} does not clear the threshold {threshold:.2%}",
            )
        reasons = (why, *usable.reasons)
    return AblationEffect(
        a=measurement.a,
        b=measurement.b,
        verdict=verdict,
        beyond_noise=beyond,
        delta_ms=delta,
        delta_low_ms=delta_low,
        delta_high_ms=delta_high,
        slowdown=slowdown,
        slowdown_low=slowdown_low,
        slowdown_high=slowdown_high,
        confidence=confidence,
        threshold=threshold,
        blocks_used=len(usable.used),
        blocks_voided=usable.voided,
        reasons=reasons,
    )


def _clocks(block: PairedBlock) -> list[float]:
    return [
        s.sm_clock_mhz
        for s in block.telemetry
        if s.sm_clock_mhz is not None and math.isfinite(s.sm_clock_mhz)
    ]


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0

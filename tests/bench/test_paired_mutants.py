"""kopt_core.bench.paired where tests/bench/test_paired.py left mutants alive, on constructed blocks with
known answers: the percentile bootstrap exactly (its seed, its quantiles, its chunks, float32 input), the
argument checks at their edges, the verdicts exactly at 1 +- threshold, every reason word for word (a
failed measurement, more than five voided blocks, no telemetry, the order balance at its threshold), the
voiding rules at theirs (the clock tolerance within a block, readings of 0, a slowdown in any reading, an
unnamed bit, a block the worker voided), and that decide, attribution and noise_threshold pass their
options on."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from kopt_core.bench.paired import (
    attribution,
    block_order,
    bootstrap_difference_ci,
    bootstrap_ratio_ci,
    decide,
    noise_threshold,
    void_unstable,
)
from kopt_core.records import (
    AblationEffect,
    PairedBlock,
    PairedComparison,
    PairedMeasurement,
    TelemetrySample,
)

paired = importlib.import_module("kopt_core.bench.paired")

# 12 blocks of B about 2% faster, with scatter (the ratios are all different)
A_MS = [1.02, 1.031, 1.018, 1.025, 1.04, 1.022, 1.019, 1.027, 1.033, 1.021, 1.029, 1.024]
B_MS = [1.0, 1.004, 0.998, 1.003, 1.012, 0.999, 1.001, 1.006, 1.002, 1.0, 1.008, 0.997]


def percentile_bootstrap(values, confidence: float, resamples: int, seed: int) -> tuple[float, float, float]:
    """The estimator the module documents, written out: the median, and the (1 - c)/2 and 1 - (1 - c)/2
    quantiles of the medians of ``resamples`` resamples of the blocks drawn with numpy's seeded generator."""
    values = np.asarray(values, dtype=np.float64)
    picks = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
    medians = np.median(values[picks], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(medians, [tail, 1 - tail])
    return float(np.median(values)), float(low), float(high)


def blocks(a_ms, b_ms, orders=None, telemetry=None, voided=None) -> tuple[PairedBlock, ...]:
    orders = orders or block_order(len(a_ms), seed=0)
    return tuple(
        PairedBlock(
            index=i,
            order=orders[i],
            a_ms=a,
            b_ms=b,
            telemetry=telemetry[i] if telemetry else (),
            voided=bool(voided and i in voided),
            void_reason=voided.get(i, "") if voided else "",
        )
        for i, (a, b) in enumerate(zip(a_ms, b_ms, strict=True))
    )


def measurement(a_ms=A_MS, b_ms=B_MS, **kwargs) -> PairedMeasurement:
    kwargs.setdefault("telemetry_available", True)
    return PairedMeasurement(a="best.cu", b="candidate.cu", blocks=blocks(a_ms, b_ms), **kwargs)


def reading(clock=1980.0, reasons=0, others=0) -> TelemetrySample:
    return TelemetrySample(at_s=0.0, sm_clock_mhz=clock, throttle_reasons=reasons, other_processes=others)


# ------------------------------------------------------------------------------------- the bootstrap


@pytest.mark.parametrize(("confidence", "resamples", "seed"), [(0.95, 2000, 0), (0.9, 500, 7), (0.5, 100, 3)])
def test_the_interval_is_the_seeded_percentile_bootstrap_of_the_block_medians(confidence, resamples, seed):
    ratios = np.log(np.array(A_MS) / np.array(B_MS))
    point, low, high = percentile_bootstrap(ratios, confidence, resamples, seed)
    assert bootstrap_ratio_ci(A_MS, B_MS, confidence=confidence, resamples=resamples, seed=seed) == (
        math.exp(point),
        math.exp(low),
        math.exp(high),
    )
    diffs = np.array(B_MS) - np.array(A_MS)
    assert bootstrap_difference_ci(A_MS, B_MS, confidence=confidence, resamples=resamples, seed=seed) == (
        percentile_bootstrap(diffs, confidence, resamples, seed)
    )


# 26 blocks of two equal kernels (an A/A pairing), on which seeds 0 and 1 give different intervals
AA_A = [1.0047, 1.016, 1.0116, 1.0019, 1.0087, 1.0096, 1.0032, 1.0147, 1.0023, 1.0078, 1.0103, 1.0086, 1.0117]
AA_A += [1.0148, 1.0191, 1.0057, 1.013, 1.0139, 1.0059, 1.0, 1.0195, 1.006, 1.0063, 1.0178, 1.0117, 1.0094]
AA_B = [1.0155, 1.0006, 1.0141, 1.0075, 1.0018, 1.0132, 1.0186, 1.0041, 1.0126, 1.006, 1.0148, 1.0144, 1.0044]
AA_B += [1.0166, 1.0132, 1.0137, 1.0164, 1.0086, 1.0152, 1.0176, 1.002, 1.017, 1.0079, 1.0096, 1.0029, 1.014]


def test_the_default_seed_is_0_and_another_seed_gives_another_interval():
    aa = measurement(AA_A, AA_B)
    for call in (
        lambda **seed: bootstrap_ratio_ci(AA_A, AA_B, **seed),
        lambda **seed: bootstrap_difference_ci(AA_A, AA_B, **seed),
        lambda **seed: decide(aa, 0.0, **seed),
        lambda **seed: attribution(aa, 0.0, **seed),
        lambda **seed: noise_threshold(aa, floor=0.0, **seed),
    ):
        assert call() == call(seed=0) != call(seed=1)


def test_every_block_can_be_drawn_including_the_first():
    # two blocks, differences 0 and 10 ms: a resample's median is 0, 5 or 10 (1/4, 1/2, 1/4)
    assert bootstrap_difference_ci([1.0, 1.0], [1.0, 11.0], resamples=1000) == (5.0, 0.0, 10.0)


def test_drawing_the_resamples_in_chunks_changes_nothing(monkeypatch):
    whole = bootstrap_ratio_ci(A_MS, B_MS, resamples=1000, seed=5)
    monkeypatch.setattr(paired, "_CHUNK_VALUES", 7 * len(A_MS))  # chunks of 7 resamples, the last of 6
    assert bootstrap_ratio_ci(A_MS, B_MS, resamples=1000, seed=5) == whole


def test_float32_times_are_computed_in_float64():
    a32, b32 = np.array(A_MS, dtype=np.float32), np.array(B_MS, dtype=np.float32)
    as64 = [float(x) for x in a32], [float(x) for x in b32]
    assert bootstrap_ratio_ci(a32, b32, resamples=500) == bootstrap_ratio_ci(*as64, resamples=500)
    assert bootstrap_difference_ci(a32, b32, resamples=500) == bootstrap_difference_ci(*as64, resamples=500)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"confidence": 0.0}, "confidence must lie between 0 and 1 (got 0.0)"),
        ({"confidence": 1.0}, "confidence must lie between 0 and 1 (got 1.0)"),
        ({"confidence": 1.5}, "confidence must lie between 0 and 1 (got 1.5)"),
        ({"resamples": 99}, "a percentile interval needs at least 100 resamples (got 99)"),
    ],
)
def test_the_bootstrap_refuses_a_confidence_outside_0_1_and_fewer_than_100_resamples(kwargs, message):
    with pytest.raises(ValueError) as raised:
        bootstrap_ratio_ci(A_MS, B_MS, **kwargs)
    assert str(raised.value) == message
    assert (
        bootstrap_ratio_ci(A_MS, B_MS, resamples=100, confidence=0.01)[0] == bootstrap_ratio_ci(A_MS, B_MS)[0]
    )


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([1.0, 1.0], [1.0, 0.0], "every time must be finite and positive for a ratio"),
        ([1.0, 1.0], [1.0, -1.0], "every time must be finite and positive for a ratio"),
        ([1.0, 1.0], [1.0, math.inf], "every time must be finite and positive for a ratio"),
    ],
)
def test_a_ratio_needs_positive_finite_times_on_both_sides(a, b, message):
    with pytest.raises(ValueError) as raised:
        bootstrap_ratio_ci(a, b)
    assert str(raised.value) == message


@pytest.mark.parametrize(("a", "b"), [([1.0, 1.0], [1.0, math.nan]), ([math.inf, 1.0], [1.0, 1.0])])
def test_a_difference_needs_finite_times_on_both_sides(a, b):
    with pytest.raises(ValueError) as raised:
        bootstrap_difference_ci(a, b)
    assert str(raised.value) == "every time must be finite for a difference"


def test_the_block_order_of_a_seed_is_fixed():
    assert block_order(8, seed=0) == ("AB", "BA", "AB", "BA", "AB", "BA", "BA", "AB")
    assert block_order(8, seed=2) == ("AB", "BA", "BA", "AB", "BA", "AB", "BA", "AB")
    assert block_order(7, seed=1) == ("BA", "AB", "AB", "BA", "AB", "BA", "AB")


# ---------------------------------------------------------------------------------------- decisions


def test_a_decision_passes_its_confidence_resamples_and_seed_to_the_interval():
    result = decide(measurement(), 0.001, confidence=0.9, resamples=300, seed=4, min_blocks=2)
    speedup, low, high = bootstrap_ratio_ci(A_MS, B_MS, confidence=0.9, resamples=300, seed=4)
    assert (result.speedup, result.ci_low, result.ci_high) == (speedup, low, high)
    assert (result.confidence, result.threshold, result.blocks_used, result.blocks_voided) == (
        0.9,
        0.001,
        12,
        0,
    )
    assert (
        decide(measurement(), 0.001, resamples=300).ci_low == bootstrap_ratio_ci(A_MS, B_MS, resamples=300)[1]
    )


def test_a_lower_bound_exactly_at_1_plus_threshold_is_not_faster():
    same = measurement([2.0] * 10, [1.0] * 10)  # every block a/b = 2 exactly: the interval is [2, 2]
    result = decide(same, 1.0, resamples=100)
    assert (result.verdict, result.ci_low) == ("not_faster", 2.0)
    assert result.reasons[0] == (
        "no clear difference: the 95% interval of a/b [2.0000, 2.0000] does not clear 1 +- threshold "
        "(100.00%)"
    )
    result = decide(same, 0.5, resamples=100)
    assert (result.verdict, result.reasons[0]) == (
        "faster",
        "B is faster: the 95% interval of a/b [2.0000, 2.0000] lies above 1 + threshold (1.5000)",
    )


def test_an_upper_bound_exactly_at_1_minus_threshold_is_not_slower():
    slower = measurement([1.0] * 10, [2.0] * 10)  # a/b = 0.5 exactly
    assert decide(slower, 0.5, resamples=100).verdict == "not_faster"
    result = decide(slower, 0.25, resamples=100)
    assert (result.verdict, result.reasons[0]) == (
        "slower",
        "B is slower: the 95% interval of a/b [0.5000, 0.5000] lies below 1 - threshold (0.7500)",
    )


def test_a_failed_measurement_says_which_side_failed_where_and_why():
    failed = measurement(status="failed", failed_side="b", error_stage="timing", error="work escaped")
    result = decide(failed, 0.01)
    assert (result.verdict, result.reasons, result.blocks_used, result.blocks_voided) == (
        "invalid",
        ("the measurement failed (side b) at timing: work escaped",),
        0,
        0,
    )
    bare = decide(measurement(status="error"), 0.01)
    assert bare.reasons == ("the measurement error: no error given",)


def test_min_blocks_may_be_two_but_not_fewer():
    assert decide(measurement(A_MS[:2], B_MS[:2]), 0.0, min_blocks=2, resamples=100).verdict != "invalid"
    with pytest.raises(ValueError) as raised:
        decide(measurement(), 0.0, min_blocks=1)
    assert str(raised.value) == "min_blocks must be at least 2 (got 1)"


def test_more_than_five_voided_blocks_are_counted_not_listed():
    a = list(A_MS) + [math.nan] * 7
    b = list(B_MS) + [1.0] * 7
    result = decide(measurement(a, b), 0.0, resamples=100)
    shown = "; ".join(f"block {i}: time not finite and positive (a nan ms, b 1.0 ms)" for i in range(12, 17))
    assert result.reasons[1] == f"voided 7 of 19 blocks: {shown}; and 2 more"
    six = decide(measurement(a[:18], b[:18]), 0.0, resamples=100)
    assert six.reasons[1] == f"voided 6 of 18 blocks: {shown}; and 1 more"
    five = decide(measurement(a[:17], b[:17]), 0.0, resamples=100)
    assert five.reasons[1] == f"voided 5 of 17 blocks: {shown}"


def test_a_measurement_without_telemetry_says_so_with_its_note():
    assert decide(measurement(telemetry_available=False, telemetry_note="NVML not found"), 0.0).reasons[
        1:
    ] == ("no GPU telemetry (NVML not found): no block could be voided for clocks or neighbours",)
    assert decide(measurement(telemetry_available=False), 0.0).reasons[1:] == (
        "no GPU telemetry: no block could be voided for clocks or neighbours",
    )
    assert decide(measurement(), 0.0).reasons[1:] == ()


def order_case(ab: int, ba: int) -> PairedMeasurement:
    n = ab + ba
    orders = ["AB"] * ab + ["BA"] * ba
    return PairedMeasurement(
        a="x", b="y", blocks=blocks([1.0] * n, [1.0] * n, orders=orders), telemetry_available=True
    )


@pytest.mark.parametrize(
    ("ab", "ba", "lost"),
    [
        (13, 8, False),  # 21 used: a difference of 5 is allowed (21 // 4)
        (14, 7, True),
        (10, 10, False),
        (4, 2, True),  # 6 used: at least a difference of 1 is allowed, 2 is not
        (2, 1, False),
    ],
)
def test_the_order_balance_is_lost_beyond_a_quarter_of_the_used_blocks(ab, ba, lost):
    reasons = decide(order_case(ab, ba), 0.0, min_blocks=2, resamples=100).reasons
    message = (
        f"order balance lost after voiding ({ab} AB vs {ba} BA blocks): an effect of running first or second "
        "no longer cancels"
    )
    assert (message in reasons) is lost
    assert len(reasons) == 1 + lost


# ----------------------------------------------------------------------------------------- voiding


def with_telemetry(samples_per_block) -> tuple[PairedBlock, ...]:
    n = len(samples_per_block)
    return blocks([1.0] * n, [1.0] * n, telemetry=samples_per_block)


def test_a_clock_that_moves_exactly_the_tolerance_is_kept_and_one_mhz_more_is_not():
    steady = [(reading(2000.0), reading(2000.0))] * 9
    kept = void_unstable(with_telemetry([*steady, (reading(2000.0), reading(1940.0))]))
    assert not any(b.voided for b in kept)  # 60 MHz is exactly 3% of the higher reading, 2000
    out = void_unstable(with_telemetry([*steady, (reading(2000.0), reading(1939.0))]))
    assert [b.voided for b in out] == [False] * 9 + [True]
    assert out[-1].void_reason == (
        "SM clock moved 3.0% while the block ran (readings 2000, 1939 MHz; tolerance 3.0%)"
    )
    # relative to the higher reading, whichever comes first: 2000 after 1940 is the same 3%
    assert not any(b.voided for b in void_unstable(with_telemetry([(reading(1940.0), reading(2000.0))] * 2)))


def test_the_clock_rule_is_relative_and_readings_of_zero_say_nothing():
    tiny = [(reading(0.5), reading(0.5))] * 5 + [(reading(0.5), reading(0.6))]
    assert [b.voided for b in void_unstable(with_telemetry(tiny))] == [False] * 5 + [True]
    zeros = [(reading(0.0), reading(0.0))] * 5 + [(reading(1500.0), reading(1500.0))]
    assert not any(b.voided for b in void_unstable(with_telemetry(zeros)))
    # a block's clock is judged within the block only: one steady block 25% below the others is kept
    lower = [(reading(2000.0), reading(2000.0))] * 5 + [(reading(1500.0), reading(1500.0))]
    assert not any(b.voided for b in void_unstable(with_telemetry(lower)))


def test_a_slowdown_in_any_reading_of_the_block_voids_it():
    out = void_unstable(with_telemetry([(reading(), reading())] * 3 + [(reading(reasons=0x8), reading())]))
    assert [b.voided for b in out] == [False, False, False, True]
    assert out[-1].void_reason == "the GPU slowed itself down: clocks-event reasons HwSlowdown (0x8)"
    both = void_unstable(with_telemetry([(reading(reasons=0x8), reading(reasons=0x40)), (reading(),)]))
    assert both[0].void_reason == (
        "the GPU slowed itself down: clocks-event reasons HwSlowdown, HwThermalSlowdown (0x48)"
    )


def test_a_slowdown_bit_without_a_name_still_voids():
    out = void_unstable(
        with_telemetry([(reading(reasons=0x10000), reading()), (reading(),)]), slowdown_mask=0x10000
    )
    assert out[0].void_reason == "the GPU slowed itself down: clocks-event reasons unnamed (0x10000)"


def test_a_process_that_appears_is_counted_against_the_quietest_reading():
    out = void_unstable(with_telemetry([(reading(others=1), reading(others=1))] * 3 + [(reading(others=3),)]))
    assert out[-1].void_reason == (
        "3 other compute process(es) on the GPU, 2 more than at the quietest reading: another process "
        "started while the block ran"
    )


def test_a_block_the_worker_voided_keeps_its_reason_and_gains_new_ones():
    telemetry = [(reading(2000.0),)] * 4 + [(reading(2000.0), reading(1000.0)), (reading(2000.0),)]
    made = blocks([1.0] * 6, [1.0] * 6, telemetry=telemetry, voided={4: "the worker lost a sample", 5: ""})
    out = void_unstable(made)
    assert out[4].void_reason == (
        "the worker lost a sample; SM clock moved 50.0% while the block ran (readings 2000, 1000 MHz; "
        "tolerance 3.0%)"
    )
    assert (out[5].voided, out[5].void_reason) == (True, "voided by the worker")


def test_decide_and_attribution_use_the_clock_tolerance_they_are_given():
    telemetry = [(reading(2000.0),)] * 11 + [(reading(2000.0), reading(1800.0))]  # moved 10%
    made = PairedMeasurement(
        a="x", b="y", blocks=blocks(A_MS, B_MS, telemetry=telemetry), telemetry_available=True
    )
    assert (decide(made, 0.0).blocks_used, decide(made, 0.0, clock_tolerance=0.2).blocks_used) == (11, 12)
    assert attribution(made, 0.0).blocks_used == 11
    assert attribution(made, 0.0, clock_tolerance=0.2).blocks_used == 12


# ------------------------------------------------------------------------------------- attribution


def test_attribution_passes_its_options_on_and_inverts_the_interval_exactly():
    effect = attribution(measurement(B_MS, A_MS), 0.005, confidence=0.9, resamples=300, seed=2, min_blocks=2)
    delta, delta_low, delta_high = bootstrap_difference_ci(B_MS, A_MS, confidence=0.9, resamples=300, seed=2)
    speedup, low, high = bootstrap_ratio_ci(B_MS, A_MS, confidence=0.9, resamples=300, seed=2)
    assert effect == AblationEffect(
        a="best.cu",
        b="candidate.cu",
        verdict="beyond_noise",
        beyond_noise=True,
        delta_ms=delta,
        delta_low_ms=delta_low,
        delta_high_ms=delta_high,
        slowdown=1 / speedup - 1,
        slowdown_low=1 / high - 1,
        slowdown_high=1 / low - 1,
        confidence=0.9,
        threshold=0.005,
        blocks_used=12,
        blocks_voided=0,
        reasons=(
            f"beyond noise: the 90% interval of the slowdown without the method [{1 / high - 1:+.2%}, "
            f"{1 / low - 1:+.2%}] lies above the threshold 0.50%",
        ),
    )
    assert (
        attribution(measurement(B_MS, A_MS), 0.005).delta_ms == bootstrap_difference_ci(B_MS, A_MS, seed=0)[0]
    )


def test_attribution_draws_the_time_saved_with_its_seed_and_counts_voided_blocks():
    a, b = list(AA_B) + [1.0, 1.0], list(AA_A) + [math.inf, 1.0]
    made = PairedMeasurement(a="x", b="y", blocks=blocks(a, b), telemetry_available=True)
    made = PairedMeasurement(
        a="x", b="y", blocks=(*made.blocks[:-1], PairedBlock(index=27, order="BA", a_ms=1.0, b_ms=-1.0))
    )
    effect = attribution(made, 0.0, resamples=100, seed=2)
    assert (effect.delta_ms, effect.delta_low_ms, effect.delta_high_ms) == bootstrap_difference_ci(
        AA_B, AA_A, resamples=100, seed=2
    )
    assert (effect.blocks_used, effect.blocks_voided) == (26, 2)


def test_a_lower_bound_exactly_at_the_threshold_is_within_noise():
    same = measurement([1.0] * 10, [1.25] * 10)  # without the method every block is 25% slower, exactly
    first = attribution(same, 0.0, resamples=100)
    assert (first.verdict, first.slowdown_low, first.slowdown_high) == (
        "beyond_noise",
        1 / 0.8 - 1,
        1 / 0.8 - 1,
    )
    at = attribution(same, first.slowdown_low, resamples=100)
    assert (at.verdict, at.beyond_noise) == ("within_noise", False)


def test_an_invalid_attribution_is_never_beyond_noise():
    effect = attribution(measurement(status="failed", error="crash"), 0.01)
    assert (effect.verdict, effect.beyond_noise, effect.blocks_voided) == ("invalid", False, 0)


@pytest.mark.parametrize("threshold", [math.inf, math.nan, -0.01])
def test_attribution_refuses_a_threshold_that_is_not_a_finite_effect(threshold):
    with pytest.raises(ValueError) as raised:
        attribution(measurement(), threshold)
    assert str(raised.value) == f"threshold must be a finite relative effect >= 0 (got {threshold})"


# ---------------------------------------------------------------------------------- noise threshold


def test_the_noise_threshold_decides_the_aa_pairing_with_its_options():
    aa = measurement(A_MS, [a * 1.001 for a in B_MS])
    result = decide(aa, 0.0, confidence=0.8, seed=3, min_blocks=2)
    expected = max(0.0, 1 - result.ci_low, result.ci_high - 1)
    assert noise_threshold(aa, floor=0.0, confidence=0.8, seed=3, min_blocks=2) == expected
    assert noise_threshold(aa, floor=0.0) == max(0.0, 1 - decide(aa, 0.0).ci_low, decide(aa, 0.0).ci_high - 1)
    short = measurement(A_MS[:4], B_MS[:4])
    assert noise_threshold(short, floor=0.0, min_blocks=4) > 0  # with the default of 10 blocks: invalid


@pytest.mark.parametrize("floor", [math.inf, math.nan, -0.001])
def test_the_noise_floor_must_be_a_finite_effect(floor):
    with pytest.raises(ValueError) as raised:
        noise_threshold(measurement(), floor=floor)
    assert str(raised.value) == f"floor must be a finite relative effect >= 0 (got {floor})"


def comparison(low, high, reasons=()) -> PairedComparison:
    return PairedComparison(
        a="x", b="x", verdict="not_faster", speedup=1.0, ci_low=low, ci_high=high, reasons=reasons
    )


def test_an_aa_comparison_without_a_whole_interval_gives_no_threshold():
    for low, high in ((None, 1.01), (0.99, None)):
        with pytest.raises(ValueError) as raised:
            noise_threshold(comparison(low, high))
        assert str(raised.value) == (
            "the A/A pairing of the baseline with itself is invalid, so the noise is unknown: no interval"
        )
    with pytest.raises(ValueError) as raised:
        noise_threshold(comparison(None, None, reasons=("too few", "voided 3")))
    assert str(raised.value).endswith("the noise is unknown: too few; voided 3")
    with pytest.raises(ValueError) as raised:
        noise_threshold(comparison(0.99, math.inf))
    assert str(raised.value) == "the A/A pairing's interval is not finite ([0.99, inf])"
    assert noise_threshold(comparison(0.99, 1.02), floor=0.0) == pytest.approx(0.02, abs=1e-15)

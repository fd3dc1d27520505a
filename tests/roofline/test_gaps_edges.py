"""roofline.json's decisions at their edges (kopt_core.roofline.gaps): near_peak at NEAR_PEAK_DELTA, the
latency bound at LATENCY_BOUND_DELTA and LATENCY_BOUND_UTIL, a saturated unit at SATURATED_PCT, ties of the
bound, the gaps from the heuristic's inputs, the latency gap's stall, and the axis budget's rounding and
cap.

The workload roofline runs on unit ceilings (1 B/s, 1 FLOP/s) over one second, so the utilisations are the
workload's numbers exactly and every edge is hit without rounding."""

from __future__ import annotations

import math

import pytest

from kopt_core.records.roofline import Ceilings
from kopt_core.roofline import axis_budget, compute_roofline
from kopt_core.roofline.gaps import (
    LABEL_HEURISTIC,
    LABEL_ROOFLINE,
    LATENCY_BOUND_DELTA,
    LATENCY_BOUND_UTIL,
    NEAR_PEAK_DELTA,
    SATURATED_PCT,
    latency_gap,
)

UNIT = Ceilings(device="unit", bandwidth_bytes_per_s=1.0, flops_per_s={"float32": 1.0}, source="unit")
STALL = "warp_stall_long_scoreboard_pct"


def roof(compute_util: float, memory_util: float, stall_pct: float | None = None, **metrics):
    """The workload roofline of a kernel at these utilisations, with this largest stall share."""
    if stall_pct is not None:
        metrics[STALL] = stall_pct
    return compute_roofline(
        metrics,
        duration_ms=1000.0,
        workload={"flops": compute_util, "bytes_min": memory_util},
        ceilings=UNIT,
        peak_dtype="float32",
    )


def heuristic(**metrics):
    return compute_roofline(metrics, duration_ms=None, workload=None, ceilings=None, peak_dtype=None)


def bound_reason(roofline) -> str:
    (reason,) = [r for r in roofline.reasons if r.startswith("bound ")]
    return reason


def test_the_thresholds_these_edges_are_at():
    assert (NEAR_PEAK_DELTA, LATENCY_BOUND_DELTA, LATENCY_BOUND_UTIL, SATURATED_PCT) == (0.15, 0.5, 0.5, 80.0)
    r = roof(0.25, 0.75, 40.0)
    assert r.label == LABEL_ROOFLINE
    assert (r.compute_utilization, r.memory_utilization) == (0.25, 0.75)
    assert (r.delta_compute, r.delta_memory, r.delta_latency) == (0.75, 0.25, 0.4)


# ------------------------------------------------------------------------------------------ near_peak

NEAR_TRUE = "near_peak true: all three gaps below 0.15 on the workload roofline"


def test_near_peak_at_the_latency_threshold():
    at = roof(0.95, 0.95, 15.0)
    assert at.delta_latency == NEAR_PEAK_DELTA
    assert not at.near_peak
    assert at.reasons[-1] == "near_peak false: gap at or above 0.15 for latency 0.150"
    below = roof(0.95, 0.95, 14.999999)
    assert below.delta_latency < NEAR_PEAK_DELTA
    assert below.near_peak and below.reasons[-1] == NEAR_TRUE


@pytest.mark.parametrize("axis", ["compute", "memory"])
def test_near_peak_at_the_compute_and_memory_thresholds(axis):
    def at_util(util):
        return roof(util, 0.95, 10.0) if axis == "compute" else roof(0.95, util, 10.0)

    # 1 - 0.85 is 0.15000000000000002 in binary: at the threshold, not below it
    at = at_util(0.85)
    assert getattr(at, f"delta_{axis}") >= NEAR_PEAK_DELTA
    assert not at.near_peak
    assert at.reasons[-1] == f"near_peak false: gap at or above 0.15 for {axis} 0.150"
    below = at_util(math.nextafter(0.85, 1.0))
    assert getattr(below, f"delta_{axis}") < NEAR_PEAK_DELTA
    assert below.near_peak and below.reasons[-1] == NEAR_TRUE


def test_near_peak_names_every_gap_at_or_above_the_threshold():
    r = roof(0.5, 0.85, 15.0)
    assert (
        r.reasons[-1]
        == "near_peak false: gap at or above 0.15 for compute 0.500, memory 0.150, latency 0.150"
    )


def test_near_peak_at_the_below_floor_tolerance():
    # up to 2% over the compute ceiling is clamped (gap 0) and still near the peak; beyond it, below floor
    at = roof(1.02, 0.95, 10.0)
    assert (at.below_floor, at.delta_compute, at.near_peak) == (False, 0.0, True)
    assert "compute utilisation 102.0% is above the ceiling: gap clamped to 0" in at.reasons
    over = roof(math.nextafter(1.02, 2.0), 0.95, 10.0)
    assert (over.below_floor, over.delta_compute, over.near_peak) == (True, 0.0, False)
    assert over.reasons[-1] == "near_peak false: the measured time is below the roofline floor"


def test_near_peak_is_never_claimed_by_the_heuristic_even_at_the_peak():
    r = heuristic(sm_throughput_pct=100.0, memory_throughput_pct=100.0, **{STALL: 0.0})
    assert (r.label, r.delta_compute, r.delta_memory, r.delta_latency) == (LABEL_HEURISTIC, 0.0, 0.0, 0.0)
    assert not r.near_peak


# ---------------------------------------------------------------------------------------------- bound


def test_latency_bound_at_the_stall_threshold():
    at = roof(0.4, 0.4, 50.0)
    assert at.bound == "latency"
    assert bound_reason(at) == (
        "bound latency: compute and memory utilisation under 50.0% while the largest stall share is 50.0%"
    )
    below = roof(0.4, 0.4, 49.999999)
    # equal floors (0.4 s each): a tie counts as compute
    assert below.bound == "compute"
    assert bound_reason(below) == (
        "bound compute: compute floor 400 ms vs memory floor 400 ms (the larger floor bounds; a tie counts "
        "as compute)"
    )


@pytest.mark.parametrize("axis", ["compute", "memory"])
def test_latency_bound_needs_both_utilisations_under_half(axis):
    def at_util(util):
        return roof(util, 0.1, 60.0) if axis == "compute" else roof(0.1, util, 60.0)

    at = at_util(LATENCY_BOUND_UTIL)
    assert at.bound == axis  # the busy axis's floor is the larger (0.5 s against 0.1 s)
    assert at_util(math.nextafter(LATENCY_BOUND_UTIL, 0.0)).bound == "latency"


def test_the_larger_floor_bounds_and_a_tie_counts_as_compute():
    assert roof(0.3, 0.3, 10.0).bound == "compute"
    assert roof(0.3, math.nextafter(0.3, 1.0), 10.0).bound == "memory"
    assert roof(math.nextafter(0.3, 1.0), 0.3, 10.0).bound == "compute"


@pytest.mark.parametrize(
    ("unit", "axis", "floors"), [("sm", "compute", (0.1, 0.3)), ("memory", "memory", (0.3, 0.1))]
)
def test_a_unit_saturated_at_eighty_percent_bounds_whatever_the_floors_say(unit, axis, floors):
    other = "memory" if axis == "compute" else "compute"
    at = roof(*floors, 10.0, **{f"{unit}_throughput_pct": SATURATED_PCT})
    assert at.bound == axis
    assert bound_reason(at) == (
        f"bound {axis}: ncu measured the {axis} units at 80.0% of their peak (>= 80%: saturated)"
    )
    below = roof(*floors, 10.0, **{f"{unit}_throughput_pct": math.nextafter(SATURATED_PCT, 0.0)})
    assert below.bound == other  # the floors decide again


def test_saturation_comes_before_the_latency_bound_and_ties_go_to_compute():
    assert roof(0.1, 0.1, 90.0).bound == "latency"
    assert roof(0.1, 0.1, 90.0, memory_throughput_pct=80.0).bound == "memory"
    both = roof(0.1, 0.3, 10.0, sm_throughput_pct=85.0, memory_throughput_pct=85.0)
    assert both.bound == "compute"
    assert roof(0.1, 0.3, 10.0, sm_throughput_pct=85.0, memory_throughput_pct=85.5).bound == "memory"


def test_the_heuristic_bound_at_its_ties():
    tie = heuristic(sm_throughput_pct=60.0, memory_throughput_pct=60.0)
    assert tie.bound == "compute"
    assert bound_reason(tie) == (
        "bound compute: the higher speed-of-light utilisation (compute 60.0%, memory 60.0%; a tie counts as "
        "compute)"
    )
    assert heuristic(sm_throughput_pct=60.0, memory_throughput_pct=60.000001).bound == "memory"


def test_one_known_utilisation_bounds_unless_the_stalls_dominate():
    only = heuristic(sm_throughput_pct=30.0, **{STALL: 49.0})
    assert only.bound == "compute"
    assert bound_reason(only) == "bound compute: the only axis with a known utilisation (memory unknown)"
    assert heuristic(sm_throughput_pct=30.0, **{STALL: 50.0}).bound == "latency"
    assert heuristic(dram_throughput_pct=30.0).bound == "memory"
    unknown = heuristic(**{STALL: 90.0})
    assert unknown.bound == "unknown"
    assert bound_reason(unknown) == "bound unknown: neither the compute nor the memory gap is known"


# ----------------------------------------------------------------------------------------------- gaps


def test_heuristic_gaps_take_the_busier_compute_pipe_and_the_first_memory_reading():
    tensor = heuristic(sm_throughput_pct=50.0, tensor_pipe_utilization_pct=60.0)
    assert tensor.delta_compute == pytest.approx(0.4)
    assert "compute utilisation from tensor_pipe_utilization_pct 60.0% (> SM)" in tensor.reasons
    equal = heuristic(sm_throughput_pct=50.0, tensor_pipe_utilization_pct=50.0)
    assert equal.delta_compute == 0.5
    assert "compute utilisation from sm_throughput_pct 50.0%" in equal.reasons
    assert heuristic(memory_throughput_pct=30.0, dram_throughput_pct=90.0).delta_memory == pytest.approx(0.7)
    assert heuristic(memory_throughput_pct=None, dram_throughput_pct=90.0).delta_memory == pytest.approx(0.1)
    assert heuristic(memory_throughput_pct=math.nan, dram_throughput_pct=90.0).delta_memory == pytest.approx(
        0.1
    )
    # over 100% and at 0%: the gap is clamped to [0, 1]
    assert (
        heuristic(sm_throughput_pct=120.0).delta_compute,
        heuristic(sm_throughput_pct=0.0).delta_compute,
    ) == (
        0.0,
        1.0,
    )
    # no SM reading: the tensor pipe alone gives no compute gap
    assert heuristic(tensor_pipe_utilization_pct=60.0).delta_compute is None


def test_the_latency_gap_is_the_largest_real_stall():
    assert latency_gap({}) == (None, None, "latency gap unknown: no warp-stall share was measured")
    # the issuing warp and a ready warp that was not picked are not stalls; NaN and None are unknown
    ignored = {
        "warp_stall_selected_pct": 90.0,
        "warp_stall_not_selected_pct": 80.0,
        "warp_stall_wait_pct": None,
    }
    assert latency_gap({**ignored, "warp_stall_barrier": 70.0, "warp_stall_math_pct": math.nan})[0] is None
    delta, key, reason = latency_gap({**ignored, "warp_stall_wait_pct": 30.0, "warp_stall_barrier_pct": 30.0})
    assert (delta, key) == (0.3, "warp_stall_barrier_pct")  # a tie goes to the key that sorts first
    assert reason == "latency gap 0.300 = largest warp-stall share warp_stall_barrier_pct 30.0% / 100"
    assert latency_gap({"warp_stall_wait_pct": 130.0})[0] == 1.0


# --------------------------------------------------------------------------------------------- budget


def _budget(compute, memory, latency):
    return axis_budget({"compute": compute, "memory": memory, "latency": latency})


def test_a_share_of_exactly_the_cap_is_not_capped():
    budget, reasons = _budget(0.4, 0.2, 0.0)
    assert budget == {"compute": 2, "memory": 1, "latency": 0}
    assert not any("capped" in reason for reason in reasons)
    assert reasons == [
        "budget latency=0: its gap is 0",
        "budget proportional to the known gaps (total 3, cap 2): quotas compute 2.00, memory 1.00",
        "budget compute=2, memory=1, latency=0",
    ]


def test_a_remainder_tie_goes_in_axis_order_also_across_an_axis():
    assert _budget(0.4, 0.0, 0.4)[0] == {"compute": 2, "memory": 0, "latency": 1}
    assert _budget(0.0, 0.4, 0.4)[0] == {"compute": 0, "memory": 2, "latency": 1}
    # quotas 1.4999999999999996 and 1.5: a tie once rounded, so compute (first) takes the odd slot
    assert _budget(0.3, 0.1 + 0.2, 0.0)[0] == {"compute": 2, "memory": 1, "latency": 0}


def test_a_zero_gap_gets_nothing_and_any_positive_gap_may_take_the_capped_remainder():
    budget, reasons = _budget(0.0, 1e-9, 1.0)
    assert budget == {"compute": 0, "memory": 1, "latency": 2}
    assert "budget compute=0: its gap is 0" in reasons
    assert "budget latency capped at 2 (its share was 3); the rest goes to memory" in reasons


def test_a_single_known_gap_leaves_a_slot_unspent():
    budget, reasons = axis_budget({"compute": 1e-12, "memory": None, "latency": None})
    assert budget == {"compute": 2, "memory": 0, "latency": 0}
    assert reasons[-3:] == [
        "budget compute capped at 2 (its share was 3); the rest goes to no other known axis",
        "1 slot(s) left unspent: no other known axis can take them under the cap",
        "budget compute=2, memory=0, latency=0",
    ]


def test_no_arithmetic_gives_no_compute_slot_on_the_roofline():
    r = compute_roofline(
        {STALL: 40.0},
        duration_ms=1000.0,
        workload={"flops": 0, "bytes_min": 0.5},
        ceilings=UNIT,
        peak_dtype="float32",
    )
    assert (r.delta_compute, r.delta_memory, r.delta_latency) == (0.0, 0.5, 0.4)
    assert r.axis_budget == {"compute": 0, "memory": 2, "latency": 1}
    assert r.bound == "memory"

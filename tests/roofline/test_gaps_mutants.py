"""kopt_core.roofline.gaps where the other gap tests left mutants alive: the reasons roofline.json gives
(word for word), the largest stall when it does not sort first, the duration a roofline records, remainders
that tie to nine decimal places, and the guards against an inconsistent reading.

The workload roofline runs on unit ceilings (1 B/s, 1 FLOP/s) over one second, so the utilisations are the
workload's numbers exactly."""

from __future__ import annotations

import importlib

import pytest

from kopt_core.records.roofline import Ceilings
from kopt_core.roofline import axis_budget, compute_roofline
from kopt_core.roofline.reading import LABEL_ROOFLINE, AxisReading

# by name: kopt_core.roofline re-exports functions under the submodules' names
gaps = importlib.import_module("kopt_core.roofline.gaps")

UNIT = Ceilings(device="unit", bandwidth_bytes_per_s=1.0, flops_per_s={"float32": 1.0}, source="unit")


def heuristic(**metrics):
    return compute_roofline(metrics, duration_ms=None, workload=None, ceilings=None, peak_dtype=None)


def test_a_roofline_records_the_duration_it_was_read_at():
    roofline = compute_roofline(
        {"warp_stall_long_scoreboard_pct": 20.0},
        duration_ms=1000.0,
        workload={"flops": 0.25, "bytes_min": 0.5},
        ceilings=UNIT,
        peak_dtype="float32",
    )
    assert (roofline.duration_ms, roofline.compute_utilization, roofline.memory_utilization) == (
        1000.0,
        0.25,
        0.5,
    )
    assert heuristic(sm_throughput_pct=10.0).duration_ms is None


def test_the_largest_stall_wins_even_when_its_name_sorts_last():
    stalls = {
        "warp_stall_barrier_pct": 10.0,
        "warp_stall_long_scoreboard_pct": 40.0,
        "warp_stall_wait_pct": 25.0,
    }
    assert gaps.latency_gap(stalls) == (
        0.4,
        "warp_stall_long_scoreboard_pct",
        "latency gap 0.400 = largest warp-stall share warp_stall_long_scoreboard_pct 40.0% / 100",
    )


def test_the_heuristic_says_why_it_never_claims_near_peak():
    roofline = heuristic(sm_throughput_pct=99.0, memory_throughput_pct=99.0, warp_stall_wait_pct=1.0)
    assert roofline.near_peak is False
    assert roofline.reasons[-1] == (
        "near_peak false: no workload roofline (a bottleneck-gap heuristic never claims it)"
    )


def test_near_peak_names_every_axis_whose_gap_is_unknown():
    near, reason = gaps._near_peak({"compute": None, "memory": 0.01, "latency": None}, LABEL_ROOFLINE, False)
    assert (near, reason) == (False, "near_peak false: gap unknown for compute, latency")


def test_a_bound_from_memory_alone_names_compute_as_the_unknown_axis():
    roofline = heuristic(memory_throughput_pct=40.0)
    bound = [r for r in roofline.reasons if r.startswith("bound ")]
    assert (roofline.bound, bound) == (
        "memory",
        ["bound memory: the only axis with a known utilisation (compute unknown)"],
    )
    roofline = heuristic(sm_throughput_pct=40.0)
    assert [r for r in roofline.reasons if r.startswith("bound ")] == [
        "bound compute: the only axis with a known utilisation (memory unknown)"
    ]


def test_no_known_gap_says_every_budget_is_zero():
    budget, reasons = axis_budget({"compute": None, "memory": 0.0, "latency": None})
    assert budget == {"compute": 0, "memory": 0, "latency": 0}
    assert reasons == [
        "budget compute=0: its gap is unknown",
        "budget memory=0: its gap is 0",
        "budget latency=0: its gap is unknown",
        "no axis has a known, non-zero gap: every budget is 0",
    ]


def test_a_capped_axis_names_every_axis_the_rest_goes_to():
    budget, reasons = axis_budget({"compute": 0.9, "memory": 0.05, "latency": 0.05})
    assert budget == {"compute": 2, "memory": 1, "latency": 0}
    assert "budget compute capped at 2 (its share was 3); the rest goes to memory, latency" in reasons


def test_gaps_equal_to_nine_decimal_places_tie_and_the_tie_goes_in_axis_order():
    # memory's and latency's quotas differ by about 1e-9 of a slot: float noise, not a larger gap
    budget, _ = axis_budget({"compute": 0.05, "memory": 0.4 - 2e-10, "latency": 0.4})
    assert budget == {"compute": 0, "memory": 2, "latency": 1}


def reading(compute_floor_s, memory_floor_s) -> AxisReading:
    return AxisReading(
        label=LABEL_ROOFLINE,
        compute_util=0.5,
        memory_util=0.6,
        delta_compute=0.5,
        delta_memory=0.4,
        reasons=(),
        compute_floor_s=compute_floor_s,
        memory_floor_s=memory_floor_s,
    )


@pytest.mark.parametrize(("compute_floor", "memory_floor"), [(None, 0.6), (0.5, None), (None, None)])
def test_a_roofline_reading_without_both_floors_is_refused_not_bounded(compute_floor, memory_floor):
    with pytest.raises(
        ValueError, match="^a workload roofline reading with both utilisations but not both floors$"
    ):
        gaps._bound(reading(compute_floor, memory_floor), None, [])
    reasons: list[str] = []
    assert gaps._bound(reading(0.5, 0.6), None, reasons) == "memory"
    assert reasons == [
        "bound memory: compute floor 500 ms vs memory floor 600 ms "
        "(the larger floor bounds; a tie counts as compute)"
    ]


@pytest.mark.parametrize(("duration", "ceilings"), [(None, UNIT), (1000.0, None)])
def test_a_roofline_without_a_duration_or_ceilings_is_refused_even_if_the_model_check_let_it_through(
    monkeypatch, duration, ceilings
):
    monkeypatch.setattr(gaps, "why_no_roofline", lambda workload, duration, ceilings: None)
    with pytest.raises(
        ValueError, match="^why_no_roofline accepted a roofline without a duration or ceilings$"
    ):
        compute_roofline(
            {},
            duration_ms=duration,
            workload={"flops": 1.0, "bytes_min": 1.0},
            ceilings=ceilings,
            peak_dtype=None,
        )

"""Roofline gaps, bound, the evidence-driven axis budget and near_peak (CPU only)."""

from __future__ import annotations

import json
import math

import pytest

from kopt_core.jsonio import read_json, write_json
from kopt_core.records import from_data, to_data
from kopt_core.records.roofline import DEFAULT_CEILINGS, Ceilings, Roofline
from kopt_core.roofline import axis_budget, compute_roofline
from kopt_core.roofline.gaps import LABEL_HEURISTIC, LABEL_ROOFLINE

# the H200 figures of docs/measurement.md
BW = 4.28e12
FP32 = 50.9e12
CEILINGS = Ceilings(
    device="NVIDIA H200",
    bandwidth_bytes_per_s=BW,
    flops_per_s={"float32": FP32, "float16": 769e12},
    source="test",
)

# naive SGEMM 2048^3, as timed in docs/measurement.md
N = 2048
SGEMM = {"flops": 2.0 * N**3, "bytes_min": 4.0 * 3 * N**2}
SGEMM_MS = 3.140224


def budget(compute, memory, latency):
    return axis_budget({"compute": compute, "memory": memory, "latency": latency})[0]


def as_tuple(b):
    return (b["compute"], b["memory"], b["latency"])


# ------------------------------------------------------------------------------------------ budget


def test_seed_example_budget():
    assert as_tuple(budget(0.85, 0.60, 0.55)) == (1, 1, 1)


def test_cap_redistributes_to_other_known_axes():
    # quotas 2.84 / 0.16 / 0 -> compute 3 by largest remainder, capped at 2, the slot goes to memory
    b, reasons = axis_budget({"compute": 0.9, "memory": 0.05, "latency": 0.0})
    assert as_tuple(b) == (2, 1, 0)
    assert sum(b.values()) == 3
    assert any("capped at 2" in r for r in reasons)


@pytest.mark.parametrize(
    "deltas",
    [
        (1.0, 0.0, 0.0),
        (1.0, 1.0, 1.0),
        (0.9, 0.05, 0.0),
        (0.01, 0.99, 0.5),
        (0.3, 0.3, 0.0),
        (0.2, None, 0.9),
        (0.5, 0.5, 0.5),
        (0.999, 0.001, 0.001),
        (1e-9, 1e-9, 1.0),
    ],
)
def test_budget_total_and_cap(deltas):
    b = budget(*deltas)
    assert sum(b.values()) <= 3
    assert all(0 <= v <= 2 for v in b.values())
    known_nonzero = [d for d in deltas if d]
    # with two or more known non-zero gaps, the total is exactly 3
    if len(known_nonzero) >= 2:
        assert sum(b.values()) == 3
    for axis, d in zip(("compute", "memory", "latency"), deltas, strict=True):
        if not d:
            assert b[axis] == 0


def test_all_unknown_gives_zeros():
    b, reasons = axis_budget({"compute": None, "memory": None, "latency": None})
    assert as_tuple(b) == (0, 0, 0)
    assert any("unknown" in r for r in reasons)


def test_all_zero_gives_zeros():
    assert as_tuple(budget(0.0, 0.0, 0.0)) == (0, 0, 0)


def test_one_unknown_gets_zero_and_a_reason():
    b, reasons = axis_budget({"compute": 0.6, "memory": 0.3, "latency": None})
    assert as_tuple(b) == (2, 1, 0)
    assert "budget latency=0: its gap is unknown" in reasons


def test_single_known_axis_is_capped_and_total_is_2():
    b, reasons = axis_budget({"compute": None, "memory": 0.7, "latency": None})
    assert as_tuple(b) == (0, 2, 0)
    assert any("unspent" in r for r in reasons)


def test_ties_go_in_axis_order():
    assert as_tuple(budget(0.3, 0.3, 0.0)) == (2, 1, 0)
    assert as_tuple(budget(0.0, 0.4, 0.4)) == (0, 2, 1)
    assert as_tuple(budget(0.5, 0.5, 0.5)) == (1, 1, 1)


def test_largest_remainder_not_plain_rounding():
    # quotas 1.4, 1.4, 0.2: plain rounding gives 1+1+0 = 2; largest remainder gives a third slot
    assert as_tuple(budget(0.7, 0.7, 0.1)) == (2, 1, 0)


# -------------------------------------------------------------------------------------- roofline


def test_naive_sgemm_worked_example():
    stalls = {"warp_stall_long_scoreboard_pct": 30.0, "warp_stall_mio_throttle_pct": 20.0}
    r = compute_roofline(
        stalls, duration_ms=SGEMM_MS, workload=SGEMM, ceilings=CEILINGS, peak_dtype="float32"
    )
    seconds = SGEMM_MS / 1e3
    flops_rate = SGEMM["flops"] / seconds
    bytes_rate = SGEMM["bytes_min"] / seconds
    assert r.label == LABEL_ROOFLINE
    assert r.achieved.flops_per_s == pytest.approx(flops_rate)
    assert flops_rate / 1e12 == pytest.approx(5.47, abs=0.005)
    assert r.achieved.bytes_per_s == pytest.approx(bytes_rate)
    assert r.achieved.arithmetic_intensity == pytest.approx(2 * N / 12)  # 341.3 FLOP/byte
    assert r.delta_compute == pytest.approx(1 - flops_rate / FP32)
    assert r.delta_compute == pytest.approx(0.8925, abs=1e-4)
    assert r.delta_memory == pytest.approx(1 - bytes_rate / BW)
    assert r.delta_latency == pytest.approx(0.30)
    assert r.latency_metric == "warp_stall_long_scoreboard_pct"
    compute_floor = SGEMM["flops"] / FP32
    memory_floor = SGEMM["bytes_min"] / BW
    assert r.floor_ms == pytest.approx(max(compute_floor, memory_floor) * 1e3)
    # the larger floor bounds: 0.3375 ms of math against 0.0118 ms of traffic
    assert r.bound == ("compute" if compute_floor > memory_floor else "memory") == "compute"
    assert not r.below_floor
    assert not r.near_peak
    # quotas 3 * d / sum(d): compute 1.22, memory 1.37, latency 0.41 -> floors 1, 1, 0; the third slot
    # goes to the largest remainder (latency 0.41)
    deltas = (1 - flops_rate / FP32, 1 - bytes_rate / BW, 0.30)
    quotas = [3 * d / sum(deltas) for d in deltas]
    assert [math.floor(q) for q in quotas] == [1, 1, 0]
    assert max(range(3), key=lambda i: quotas[i] - math.floor(quotas[i])) == 2
    assert as_tuple(r.axis_budget) == (1, 1, 1)
    assert r.ceilings == CEILINGS and r.peak_dtype == "float32"


def test_naive_sgemm_with_a_dominant_stall_is_latency_bound():
    stalls = {"warp_stall_long_scoreboard_pct": 62.0, "warp_stall_selected_pct": 90.0}
    r = compute_roofline(
        stalls, duration_ms=SGEMM_MS, workload=SGEMM, ceilings=CEILINGS, peak_dtype="float32"
    )
    # both utilisations under 50% and the largest real stall share >= 50%: latency
    assert r.bound == "latency"
    # "selected" is the warp that issued, not a stall
    assert r.delta_latency == pytest.approx(0.62)


def test_memory_bound_kernel():
    # vector add, 64M floats, 3 x 4 bytes per element, 1 flop per element, at 4.0 TB/s
    n = 64 * 2**20
    workload = {"flops": float(n), "bytes_min": 12.0 * n}
    ms = 12.0 * n / 4.0e12 * 1e3
    r = compute_roofline({}, duration_ms=ms, workload=workload, ceilings=CEILINGS, peak_dtype="float32")
    assert r.bound == "memory"
    assert r.delta_memory == pytest.approx(1 - 4.0 / 4.28)
    assert r.delta_latency is None
    assert not r.near_peak  # latency unknown
    assert any("latency" in reason and "unknown" in reason for reason in r.reasons)


def test_below_floor_is_flagged_and_gaps_clamped():
    # twice as fast as the fp32 peak allows
    ms = SGEMM["flops"] / FP32 * 1e3 / 2
    r = compute_roofline(
        {"warp_stall_wait_pct": 5.0}, duration_ms=ms, workload=SGEMM, ceilings=CEILINGS, peak_dtype="float32"
    )
    assert r.below_floor
    assert r.compute_utilization == pytest.approx(2.0)
    assert r.delta_compute == 0.0
    assert not r.near_peak
    assert any("BELOW FLOOR" in reason for reason in r.reasons)
    assert any("clamped to 0" in reason for reason in r.reasons)


def test_within_tolerance_above_ceiling_is_clamped_not_flagged():
    ms = SGEMM["flops"] / FP32 * 1e3 / 1.01  # 1% over the ceiling: clamp, do not call it a cheat
    r = compute_roofline(
        {"warp_stall_wait_pct": 5.0}, duration_ms=ms, workload=SGEMM, ceilings=CEILINGS, peak_dtype="float32"
    )
    assert not r.below_floor
    assert r.delta_compute == 0.0


def test_peak_dtype_unknown_leaves_compute_gap_unknown():
    for dtype in (None, "bfloat16"):
        r = compute_roofline({}, duration_ms=SGEMM_MS, workload=SGEMM, ceilings=CEILINGS, peak_dtype=dtype)
        assert r.label == LABEL_ROOFLINE
        assert r.delta_compute is None
        assert r.delta_memory is not None
        assert r.axis_budget["compute"] == 0
        assert any("compute gap unknown" in reason for reason in r.reasons)


def test_workload_record_is_accepted():
    from kopt_core.records import Workload

    r = compute_roofline(
        {}, duration_ms=SGEMM_MS, workload=Workload(**SGEMM), ceilings=CEILINGS, peak_dtype="float32"
    )
    assert r.label == LABEL_ROOFLINE


def test_no_arithmetic_means_no_compute_gap():
    n = 2**26
    r = compute_roofline(
        {"warp_stall_long_scoreboard_pct": 10.0},
        duration_ms=8.0 * n / 4.2e12 * 1e3,
        workload={"flops": 0, "bytes_min": 8.0 * n},
        ceilings=CEILINGS,
        peak_dtype="float32",
    )
    assert r.delta_compute == 0.0
    assert r.bound == "memory"
    assert r.near_peak  # copy at 98% of bandwidth, compute nothing to do, small stall share


# ----------------------------------------------------------------------------------- near_peak


NEAR = {"warp_stall_long_scoreboard_pct": 10.0, "sm_throughput_pct": 95.0, "memory_throughput_pct": 95.0}


def _near_peak_roofline(metrics=NEAR, **kwargs):
    # a kernel at 92% of the fp16 peak that also moves its bytes at 90% of the bandwidth (near_peak
    # needs all three gaps under 0.15, so memory has to be close to its roof too)
    flops = 2.0 * 8192**3
    ms = flops / (0.92 * 769e12) * 1e3
    args = dict(
        duration_ms=ms,
        workload={"flops": flops, "bytes_min": 0.90 * BW * ms / 1e3},
        ceilings=CEILINGS,
        peak_dtype="float16",
    )
    args.update(kwargs)
    return compute_roofline(metrics, **args)


def test_near_peak_when_allowed():
    r = _near_peak_roofline()
    assert r.delta_compute == pytest.approx(0.08)
    assert r.delta_memory == pytest.approx(0.10)
    assert r.delta_latency == pytest.approx(0.10)
    assert r.near_peak
    assert any(reason.startswith("near_peak true") for reason in r.reasons)


def test_near_peak_never_from_heuristic():
    r = _near_peak_roofline(workload=None)
    assert r.label == LABEL_HEURISTIC
    assert r.delta_compute == pytest.approx(0.05) and r.delta_memory == pytest.approx(0.05)
    assert not r.near_peak
    assert any("heuristic never claims" in reason for reason in r.reasons)


def test_near_peak_needs_all_three_gaps():
    r = _near_peak_roofline(metrics={})
    assert r.delta_latency is None
    assert not r.near_peak
    assert any("near_peak false: gap unknown for latency" == reason for reason in r.reasons)


def test_near_peak_needs_ceilings_and_duration():
    assert _near_peak_roofline(ceilings=None).label == LABEL_HEURISTIC
    assert not _near_peak_roofline(ceilings=None).near_peak
    assert not _near_peak_roofline(duration_ms=None).near_peak


# ----------------------------------------------------------------------------------- heuristic


def test_heuristic_labels_and_gaps():
    metrics = {
        "sm_throughput_pct": 65.5,
        "memory_throughput_pct": 30.0,
        "dram_throughput_pct": 20.0,
        "warp_stall_barrier_pct": 25.0,
        "warp_stall_long_scoreboard_pct": None,
    }
    r = compute_roofline(
        metrics, duration_ms=1.0, workload=None, ceilings=DEFAULT_CEILINGS, peak_dtype="float32"
    )
    assert r.label == "bottleneck-gap heuristic"
    assert r.delta_compute == pytest.approx(0.345)
    assert r.delta_memory == pytest.approx(0.70)
    assert r.delta_latency == pytest.approx(0.25)
    assert r.bound == "compute"  # the higher utilisation
    assert r.achieved is None and r.ceilings is None and r.floor_ms is None
    assert not r.near_peak


def test_heuristic_falls_back_to_dram_and_tensor_pipe():
    metrics = {"sm_throughput_pct": 40.0, "tensor_pipe_utilization_pct": 70.0, "dram_throughput_pct": 80.0}
    r = compute_roofline(metrics, duration_ms=None, workload=None, ceilings=None, peak_dtype=None)
    assert r.delta_compute == pytest.approx(0.30)
    assert r.delta_memory == pytest.approx(0.20)
    assert r.bound == "memory"
    assert r.delta_latency is None


def test_heuristic_latency_bound_and_unknown_bound():
    slow = {"sm_throughput_pct": 20.0, "memory_throughput_pct": 10.0, "warp_stall_wait_pct": 55.0}
    r = compute_roofline(slow, duration_ms=None, workload=None, ceilings=None, peak_dtype=None)
    assert r.bound == "latency"
    r = compute_roofline(
        {"warp_stall_wait_pct": 55.0, "sm_throughput_pct": math.nan},
        duration_ms=None,
        workload=None,
        ceilings=None,
        peak_dtype=None,
    )
    assert r.bound == "unknown"
    assert as_tuple(r.axis_budget) == (0, 0, 2)
    r = compute_roofline({}, duration_ms=None, workload=None, ceilings=None, peak_dtype=None)
    assert r.bound == "unknown" and as_tuple(r.axis_budget) == (0, 0, 0)
    assert (r.delta_compute, r.delta_memory, r.delta_latency) == (None, None, None)


def test_workload_without_ceilings_is_labelled_heuristic_and_says_why():
    r = compute_roofline(
        {"sm_throughput_pct": 50.0}, duration_ms=SGEMM_MS, workload=SGEMM, ceilings=None, peak_dtype="float32"
    )
    assert r.label == LABEL_HEURISTIC
    assert any("device ceilings" in reason for reason in r.reasons)


# --------------------------------------------------------------------------------- round trip


def test_roofline_round_trip_through_json(tmp_path):
    r = compute_roofline(
        {"warp_stall_long_scoreboard_pct": 30.0},
        duration_ms=SGEMM_MS,
        workload=SGEMM,
        ceilings=DEFAULT_CEILINGS,
        peak_dtype="float32",
    )
    path = write_json(tmp_path / "roofline.json", to_data(r))
    data = read_json(path)
    assert data["schema_version"] == 1
    assert data["axis_budget"] == {
        "compute": r.axis_budget["compute"],
        "memory": r.axis_budget["memory"],
        "latency": r.axis_budget["latency"],
    }
    assert data["ceilings"]["schema_version"] == 1
    assert from_data(data, Roofline) == r

    h = compute_roofline({}, duration_ms=None, workload=None, ceilings=None, peak_dtype=None)
    data = json.loads(json.dumps(to_data(h)))
    assert data["delta_compute"] is None and data["achieved"] is None
    assert from_data(data, Roofline) == h


def test_memory_tolerance_allows_the_l2_write_back_of_a_small_working_set():
    # a 64M-element float32 add (805 MB moved) at 4.38 TB/s against a 4.28 TB/s ceiling: 2.3% over
    add = {"flops": 64 * 2**20, "bytes_min": 3 * 4 * 64 * 2**20}
    ms = add["bytes_min"] / 4.38e12 * 1e3
    with_l2 = Ceilings(
        device="NVIDIA H200",
        bandwidth_bytes_per_s=BW,
        flops_per_s={"float32": FP32},
        l2_cache_bytes=50 * 2**20,
    )
    assert not compute_roofline(
        {}, duration_ms=ms, workload=add, ceilings=with_l2, peak_dtype="float32"
    ).below_floor
    assert compute_roofline(
        {}, duration_ms=ms, workload=add, ceilings=CEILINGS, peak_dtype="float32"
    ).below_floor
    # 64 GiB moved: the same L2 excuses almost nothing, so 2.3% over is flagged again
    big = {"flops": 0.0, "bytes_min": 64 * 2**30}
    r = compute_roofline(
        {}, duration_ms=big["bytes_min"] / 4.38e12 * 1e3, workload=big, ceilings=with_l2, peak_dtype="float32"
    )
    assert r.below_floor and any("memory more than" in reason for reason in r.reasons)

"""Top ncu metrics per axis: ranking by badness, unknowns never ranked, ncu_top.json round trip."""

from __future__ import annotations

import pytest

from kopt_core.jsonio import read_json, write_json
from kopt_core.records import from_data, to_data
from kopt_core.records.roofline import NcuTop
from kopt_core.roofline import build_ncu_top, metric_values, top_metrics, unknown_keys


def row(key, value, axis, bad_when="high", unit="%", status="measured", ncu_name=None):
    return {
        "key": key,
        "value": value,
        "unit": unit,
        "axis": axis,
        "bad_when": bad_when,
        "ncu_name": ncu_name if ncu_name is not None else f"{key}.ncu",
        "status": status,
    }


ROWS = [
    row(
        "sm_throughput_pct",
        65.5,
        "compute",
        "low",
        ncu_name="sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    row("tensor_pipe_utilization_pct", 10.0, "compute", "low"),
    row("issue_slot_busy_pct", 80.0, "compute", "low"),
    row("registers_per_thread", 128.0, "compute", "neither", unit="register"),
    row(
        "fp64_pipe_utilization_pct",
        0.0,
        "compute",
        "low",
        ncu_name="sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
    ),
    row("achieved_occupancy_pct", None, "compute", "low", status="unknown"),
    row("dram_throughput_pct", 20.0, "memory", "low"),
    row("l1_hit_rate_pct", 30.0, "memory", "low"),
    row("bank_conflicts", 1.2e6, "memory", "high", unit=""),
    row("dram_bytes", 5e7, "memory", "neither", unit="byte"),
    row(
        "warp_stall_long_scoreboard_pct",
        42.0,
        "latency",
        "high",
        ncu_name="smsp__pcsamp_warps_issue_stalled_long_scoreboard",
    ),
    row("warp_stall_barrier_pct", 42.0, "latency", "high"),
    row("warp_stall_wait_pct", 5.0, "latency", "high"),
    row("warp_stall_mio_throttle_pct", float("nan"), "latency", "high", status="derived"),
    row("kernel_name_len", 3.0, "info", "neither", unit=""),
    row("device_clock", None, "info", "neither", unit="Hz", status="unknown"),
]


def keys(metrics):
    return [m.key for m in metrics]


def test_ranking_by_badness_then_non_percent():
    top = top_metrics(ROWS, 10)
    assert set(top) == {"compute", "memory", "latency"}  # the info axis is left out
    # badness: tensor 0.90 (low is bad), sm 0.655 (a utilisation: the busier the unit, the more it bounds
    # the kernel), issue 0.20; the idle fp64 pipe after the active ones; registers is not a percentage: last
    assert keys(top["compute"]) == [
        "tensor_pipe_utilization_pct",
        "sm_throughput_pct",
        "issue_slot_busy_pct",
        "fp64_pipe_utilization_pct",
        "registers_per_thread",
    ]
    assert [m.badness for m in top["compute"][:4]] == pytest.approx([0.9, 0.655, 0.2, 0.0])
    assert "65.5% of peak: 34.5% headroom" in top["compute"][1].evidence
    assert top["compute"][4].badness is None
    # dram 0.80, l1 0.70; non-% rows by key
    assert keys(top["memory"]) == ["dram_throughput_pct", "l1_hit_rate_pct", "bank_conflicts", "dram_bytes"]
    # equal badness ties by key
    assert keys(top["latency"]) == [
        "warp_stall_barrier_pct",
        "warp_stall_long_scoreboard_pct",
        "warp_stall_wait_pct",
    ]


def test_top_n_per_axis():
    top = top_metrics(ROWS, 2)
    assert {axis: len(v) for axis, v in top.items()} == {"compute": 2, "memory": 2, "latency": 2}
    assert keys(top["compute"]) == ["tensor_pipe_utilization_pct", "sm_throughput_pct"]
    assert top_metrics(ROWS, 0) == {"compute": [], "memory": [], "latency": []}


def test_unknown_rows_are_never_ranked():
    top = top_metrics(ROWS, 10)
    ranked = {m.key for ms in top.values() for m in ms}
    assert "achieved_occupancy_pct" not in ranked
    assert "warp_stall_mio_throttle_pct" not in ranked  # NaN is unknown, never zero
    assert unknown_keys(ROWS) == ["achieved_occupancy_pct", "warp_stall_mio_throttle_pct"]


def test_evidence_sentences():
    top = top_metrics(ROWS, 10)
    by_key = {m.key: m for ms in top.values() for m in ms}
    assert by_key["sm_throughput_pct"].evidence == "sm__throughput 65.5% of peak: 34.5% headroom"
    assert by_key["warp_stall_long_scoreboard_pct"].evidence == (
        "smsp__pcsamp_warps_issue_stalled_long_scoreboard 42.0%: lower is better, badness 0.42"
    )
    assert "not a percentage" in by_key["registers_per_thread"].evidence
    assert "128 register" in by_key["registers_per_thread"].evidence
    assert "idle" in by_key["fp64_pipe_utilization_pct"].evidence
    # a percentage that is not of a peak (a hit rate) is not called headroom
    assert by_key["l1_hit_rate_pct"].evidence == "l1_hit_rate_pct.ncu 30.0%: higher is better, badness 0.70"


def test_metric_values_for_compute_roofline():
    values = metric_values(ROWS)
    assert values["sm_throughput_pct"] == 65.5
    assert values["achieved_occupancy_pct"] is None
    assert values["warp_stall_mio_throttle_pct"] is None


def test_ncu_top_round_trip(tmp_path):
    top = build_ncu_top(
        ROWS,
        ncu_num=3,
        bundle="full",
        bundle_reason="kernel time 3.1 ms < 10 ms",
        duration_ms=3.14,
        kernels=1,
    )
    assert top.unknown == ("achieved_occupancy_pct", "warp_stall_mio_throttle_pct")
    path = write_json(tmp_path / "ncu_top.json", to_data(top))
    data = read_json(path)
    assert data["schema_version"] == 1
    assert list(data["axes"]) == ["compute", "memory", "latency"]
    assert data["axes"]["compute"][0]["key"] == "tensor_pipe_utilization_pct"
    assert from_data(data, NcuTop) == top

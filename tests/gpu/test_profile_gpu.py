"""GPU tests of `kopt profile`: real ncu on a CUDA kernel, a CUTLASS GEMM, a Triton kernel and a
three-kernel solve; the full-to-light fallback; ncu's time against kopt's. Run with `pytest -m gpu -s`:
each test prints what it measured, for docs/validation.md."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_core.roofline import axis_budget
from kopt_core.roofline.gaps import LATENCY_BOUND_UTIL, NEAR_PEAK_DELTA, NOT_LATENCY_STALLS

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
KERNELS = REPO / "tests" / "gpu_kernels"


def kopt_profile(kernel: Path, ref: Path, out: Path, *args: str) -> tuple[int, dict | None, str]:
    command = [
        sys.executable,
        "-m",
        "kopt_core.cli",
        "profile",
        str(kernel),
        "--ref",
        str(ref),
        "--out",
        str(out),
        "--json",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    try:
        summary = json.loads(done.stdout)["result"]  # profile.json, the roofline and the folder
    except (json.JSONDecodeError, KeyError, TypeError):
        summary = None
    return done.returncode, summary, done.stderr[-3000:]


def _show(label: str, summary: dict, out: Path) -> dict:
    roofline = json.loads((out / "roofline.json").read_text())
    print(
        f"\n[{label}] ncu {summary['ncu_duration_ms']:.4f} ms "
        f"vs kopt median {summary['harness_median_ms']:.4f} ms "
        f"({summary['harness_over_ncu']:+.2%}); bundle {summary['bundle']} ({summary['bundle_reason']}); "
        f"ncu took {summary['ncu_seconds']:.1f} s of {summary['total_seconds']:.1f} s; "
        f"gaps c={roofline['delta_compute']} m={roofline['delta_memory']} l={roofline['delta_latency']} "
        f"bound={roofline['bound']} budget={roofline['axis_budget']}"
    )
    return roofline


def _check_outputs(out: Path, summary: dict, kernels: int) -> dict:
    assert len(summary["kernels"]) == kernels
    assert Path(summary["report"]).is_file()
    top = json.loads((out / "ncu_top.json").read_text())
    assert top["schema_version"] == 1 and top["kernels"] == kernels
    assert any(top["axes"][axis] for axis in ("compute", "memory", "latency"))
    assert (out / "roofline.png").stat().st_size > 0
    return top


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_contents(out: Path, summary: dict, workload: dict, peak_dtype: str) -> dict:
    """What ncu_top.json and roofline.json say, checked against each other and the workload model
    (``workload``: the reference's flops and bytes_min at the profiled dims); returns the roofline."""
    top = json.loads((out / "ncu_top.json").read_text())
    roofline = json.loads((out / "roofline.json").read_text())
    duration_ms = summary["ncu_duration_ms"]
    assert _finite(duration_ms) and duration_ms > 0, summary
    assert top["duration_ms"] == pytest.approx(duration_ms, rel=1e-12)
    # ncu_top.json: each axis ranks up to ncu_num measured (or derived) readings, each one a finite value
    # that is also the value method selection reads
    for axis in ("compute", "memory", "latency"):
        rows = top["axes"][axis]
        assert 1 <= len(rows) <= top["ncu_num"], (axis, rows)
        for row in rows:
            assert _finite(row["value"]) and row["status"] in ("measured", "derived"), row
            assert top["values"][row["key"]] == row["value"] and row["key"] not in top["unknown"], row
            assert row["badness"] is None or 0.0 <= row["badness"] <= 1.0, row
    for key in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct"):
        assert _finite(top["values"][key]) and 0.0 <= top["values"][key] <= 100.0, (key, top["values"][key])
    # roofline.json: the workload roofline, every number finite, each derived from the others
    assert roofline["label"] == "roofline" and roofline["peak_dtype"] == peak_dtype, roofline["reasons"]
    achieved = roofline["achieved"]
    numbers = [roofline[f"delta_{axis}"] for axis in ("compute", "memory", "latency")]
    numbers += [roofline["compute_utilization"], roofline["memory_utilization"], roofline["floor_ms"]]
    assert all(_finite(number) for number in [*numbers, *achieved.values()]), roofline
    assert roofline["duration_ms"] == pytest.approx(duration_ms, rel=1e-12)
    seconds = duration_ms / 1e3
    assert achieved["flops_per_s"] == pytest.approx(workload["flops"] / seconds, rel=1e-9)
    assert achieved["bytes_per_s"] == pytest.approx(workload["bytes_min"] / seconds, rel=1e-9)
    assert achieved["arithmetic_intensity"] == pytest.approx(workload["flops"] / workload["bytes_min"])
    peak = roofline["ceilings"]["flops_per_s"][peak_dtype]
    bandwidth = roofline["ceilings"]["bandwidth_bytes_per_s"]
    assert roofline["compute_utilization"] == pytest.approx(achieved["flops_per_s"] / peak, rel=1e-9)
    assert roofline["memory_utilization"] == pytest.approx(achieved["bytes_per_s"] / bandwidth, rel=1e-9)
    for axis in ("compute", "memory"):
        clamped = min(1.0, max(0.0, roofline[f"{axis}_utilization"]))
        assert roofline[f"delta_{axis}"] == pytest.approx(1.0 - clamped, abs=1e-12)
    floor_s = max(workload["flops"] / peak, workload["bytes_min"] / bandwidth)
    assert roofline["floor_ms"] == pytest.approx(floor_s * 1e3, rel=1e-9)
    assert roofline["below_floor"] is False  # a real kernel does not beat its roofline
    stalls = {
        key: value
        for key, value in top["values"].items()
        if key.startswith("warp_stall_") and key.endswith("_pct") and key not in NOT_LATENCY_STALLS
        if value is not None
    }
    largest = min(stalls, key=lambda key: (-stalls[key], key))
    assert roofline["latency_metric"] == largest
    assert roofline["delta_latency"] == pytest.approx(min(1.0, stalls[largest] / 100.0), abs=1e-12)
    deltas = {axis: roofline[f"delta_{axis}"] for axis in ("compute", "memory", "latency")}
    assert roofline["axis_budget"] == axis_budget(deltas)[0]
    assert roofline["near_peak"] is all(delta < NEAR_PEAK_DELTA for delta in deltas.values())
    return roofline


def test_cuda_sgemm_profile_full_set(tmp_path):
    example = EXAMPLES / "cuda" / "sgemm_naive"
    rc, summary, err = kopt_profile(
        example / "kernel.cu", example / "ref.py", tmp_path, "--M=2048", "--N=2048", "--K=2048"
    )
    assert rc == 0, err
    _check_outputs(tmp_path, summary, 1)
    assert summary["bundle"] == "full"
    assert abs(summary["harness_over_ncu"]) < 0.05
    _show("cuda sgemm 2048", summary, tmp_path)
    n = 2048  # examples/cuda/sgemm_naive/ref.py's workload model: fp32 A, B and C once each
    roofline = _check_contents(tmp_path, summary, {"flops": 2 * n**3, "bytes_min": 4 * 3 * n**2}, "float32")
    assert sum(roofline["axis_budget"].values()) == 3  # three known, non-zero gaps spend the whole budget


def test_three_kernel_solve_reports_each_kernel_and_their_sum(tmp_path):
    rc, summary, err = kopt_profile(
        KERNELS / "three_kernels.cu", KERNELS / "three_kernels_ref.py", tmp_path, "--N=16777216"
    )
    assert rc == 0, err
    _check_outputs(tmp_path, summary, 3)
    names = " ".join(k["name"] for k in summary["kernels"])
    assert "double_it" in names and "add_one" in names and "triple_into" in names
    total = sum(k["duration_ms"] for k in summary["kernels"])
    assert summary["ncu_duration_ms"] == pytest.approx(total, rel=1e-9)
    _show("three kernels 16M", summary, tmp_path)


def test_full_to_light_fallback(tmp_path):
    example = EXAMPLES / "cuda" / "sgemm_naive"
    rc, summary, err = kopt_profile(
        example / "kernel.cu",
        example / "ref.py",
        tmp_path,
        "--M=2048",
        "--N=2048",
        "--K=2048",
        "--full-timeout-s",
        "2",
    )
    assert rc == 0, err
    attempts = summary["attempts"]
    assert [a["bundle"] for a in attempts] == ["full", "light"]
    assert attempts[0]["timed_out"] and attempts[1]["returncode"] == 0
    assert summary["bundle"] == "light" and "timed out" in summary["bundle_reason"]
    _show("sgemm fallback", summary, tmp_path)


def test_cutlass_gemm_profile(tmp_path):
    example = EXAMPLES / "cutlass" / "gemm_sm80_tensorop"
    rc, summary, err = kopt_profile(
        example / "kernel.cu", example / "ref.py", tmp_path, "--M=4096", "--N=4096", "--K=4096"
    )
    assert rc == 0, err
    _check_outputs(tmp_path, summary, 1)
    _show("cutlass sm80 4096", summary, tmp_path)
    n = 4096  # examples/cutlass/gemm_sm80_tensorop/ref.py's workload model: fp16 A, B and C once each
    roofline = _check_contents(tmp_path, summary, {"flops": 2 * n**3, "bytes_min": 2 * 3 * n**2}, "float16")
    # 137 GFLOP at the fp16 peak take about 8x as long as 101 MB at the bandwidth: the compute floor bounds
    # this GEMM (the H200 run of tests/fixtures/h200/runs/cutlass_sm80: tensor pipe 73%, memory units 56%)
    assert roofline["bound"] == "compute", roofline["reasons"]
    assert roofline["near_peak"] is False and roofline["delta_memory"] > NEAR_PEAK_DELTA


def test_triton_softmax_profile(tmp_path):
    example = EXAMPLES / "triton" / "softmax"
    rc, summary, err = kopt_profile(
        example / "kernel.py", example / "ref.py", tmp_path, "--M=8192", "--N=8192"
    )
    assert rc == 0, err
    _check_outputs(tmp_path, summary, 1)
    _show("triton softmax 8192", summary, tmp_path)
    n = 8192  # examples/triton/softmax/ref.py's workload model: 5 flops per element, x read and y written
    roofline = _check_contents(tmp_path, summary, {"flops": 5 * n * n, "bytes_min": 8 * n * n}, "float32")
    # A row softmax does 0.625 FLOP per byte: its memory floor is about 20x its compute floor, and it streams
    # at nearly the full bandwidth (97% on the H200, tests/fixtures/h200/runs/triton_softmax; ncu's memory
    # units 83%: saturated). A latency bound needs both utilisations under 50%, so it is memory-bound.
    assert roofline["memory_utilization"] > LATENCY_BOUND_UTIL, roofline["reasons"]
    assert roofline["bound"] == "memory", roofline["reasons"]


def test_import_of_the_report_gives_the_same_evidence(tmp_path):
    example = EXAMPLES / "cuda" / "sgemm_naive"
    rc, summary, err = kopt_profile(
        example / "kernel.cu", example / "ref.py", tmp_path / "live", "--M=1024", "--N=1024", "--K=1024"
    )
    assert rc == 0, err
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kopt_core.cli",
            "profile",
            "--import",
            summary["report"],
            "--out",
            str(tmp_path / "imported"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    live = json.loads((tmp_path / "live" / "ncu_top.json").read_text())
    imported = json.loads((tmp_path / "imported" / "ncu_top.json").read_text())
    assert live["axes"] == imported["axes"]

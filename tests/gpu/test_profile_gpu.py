"""GPU tests of `kopt profile`: real ncu on a CUDA kernel, a CUTLASS GEMM, a Triton kernel and a
three-kernel solve; the full-to-light fallback; ncu's time against kopt's. Run with `pytest -m gpu -s`:
each test prints what it measured, for docs/validation.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_cuda_sgemm_profile_full_set(tmp_path):
    example = EXAMPLES / "cuda" / "sgemm_naive"
    rc, summary, err = kopt_profile(
        example / "kernel.cu", example / "ref.py", tmp_path, "--M=2048", "--N=2048", "--K=2048"
    )
    assert rc == 0, err
    _check_outputs(tmp_path, summary, 1)
    assert summary["bundle"] == "full"
    assert abs(summary["harness_over_ncu"]) < 0.05
    roofline = _show("cuda sgemm 2048", summary, tmp_path)
    assert roofline["label"] == "roofline" and roofline["delta_compute"] is not None
    assert sum(roofline["axis_budget"].values()) <= 3


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


def test_triton_softmax_profile(tmp_path):
    example = EXAMPLES / "triton" / "softmax"
    rc, summary, err = kopt_profile(
        example / "kernel.py", example / "ref.py", tmp_path, "--M=8192", "--N=8192"
    )
    assert rc == 0, err
    _check_outputs(tmp_path, summary, 1)
    roofline = _show("triton softmax 8192", summary, tmp_path)
    assert roofline["bound"] in ("memory", "latency")


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

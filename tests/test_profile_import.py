"""`kopt profile --import` on the real H200 reports: no GPU and no ncu needed for a CSV export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "h200"
SGEMM = REPO / "examples" / "cuda" / "sgemm_naive"


def kopt(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, KOPT_PLUGINS=""),
    )


def test_import_with_a_workload_model_gives_a_real_roofline(tmp_path):
    proc = kopt(
        "profile",
        "--import",
        FIXTURES / "naive_full_raw.csv",
        "--ref",
        SGEMM / "ref.py",
        "--M=2048",
        "--N=2048",
        "--K=2048",
        "--out",
        tmp_path,
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)["result"]
    assert summary["ncu_duration_ms"] == pytest.approx(3.140224)
    roofline = json.loads((tmp_path / "roofline.json").read_text())
    assert roofline["label"] == "roofline" and roofline["peak_dtype"] == "float32"
    flops = 2 * 2048**3
    assert roofline["delta_compute"] == pytest.approx(1 - flops / 3.140224e-3 / 50.9e12, rel=1e-6)
    assert roofline["bound"] == "memory"  # ncu saw L1 at 99.4% of peak: the DRAM roofline alone cannot
    assert sum(roofline["axis_budget"].values()) == 3 and not roofline["near_peak"]
    top = json.loads((tmp_path / "ncu_top.json").read_text())
    assert top["axes"]["memory"][0]["key"] == "l1tex_throughput_pct"
    assert "saturated" in top["axes"]["memory"][0]["evidence"]
    assert top["axes"]["latency"][0]["key"] == "warp_stall_long_scoreboard_pct"
    assert (tmp_path / "roofline.png").stat().st_size > 10_000


def test_import_without_a_workload_model_is_labelled_a_heuristic(tmp_path):
    proc = kopt("profile", "--import", FIXTURES / "naive_basic_raw.csv", "--out", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    roofline = json.loads((tmp_path / "roofline.json").read_text())
    assert roofline["label"] == "bottleneck-gap heuristic" and roofline["near_peak"] is False
    top = json.loads((tmp_path / "ncu_top.json").read_text())
    assert top["bundle"] == "light" and "warp_stall_long_scoreboard_pct" in top["unknown"]  # the basic set


def test_import_of_a_file_that_is_no_report(tmp_path):
    bogus = tmp_path / "notes.csv"
    bogus.write_text("hello\n")
    proc = kopt("profile", "--import", bogus, "--out", tmp_path / "out")
    assert proc.returncode == 4 and "is not the raw page of an ncu report" in proc.stderr  # bad input
    assert "--page raw" in proc.stderr and not (tmp_path / "out").exists()
    proc = kopt("profile", "--import", tmp_path / "absent.ncu-rep")
    assert proc.returncode == 4


def test_the_peak_dtype_of_an_imported_report_is_the_input_with_most_bytes(tmp_path):
    from kopt_core.steps.profile import reference_evidence

    ref = tmp_path / "ref.py"
    ref.write_text(
        "def reference(**kw):\n    return None\n"
        "def workload_model(M, **dims):\n    return {'flops': 2.0 * M, 'bytes_min': 4.0 * M}\n"
        "def buffers(**dims):\n"  # **dims: every dim arrives
        "    M = dims['M']\n"
        "    return {'a': {'shape': (M,), 'role': 'input', 'dtype': 'float16'},\n"
        "            'b': {'shape': (M * 3 // 5,), 'role': 'input', 'dtype': 'float32'},\n"
        "            'c': {'shape': (M,), 'role': 'output', 'dtype': 'float16'}}\n"
    )
    # a: 1000 halves = 2000 bytes; b: 600 floats = 2400 bytes -> b bounds the kernel
    context = reference_evidence(ref, {"M": 1000, "N": 7})
    assert context.model == {"flops": 2000.0, "bytes_min": 4000.0} and context.peak_dtype == "float32"
    # the buffers as a bench records them: a's 1000 halves, b's 600 floats, c's 1000 halves
    assert [(b.name, b.dtype, b.role, b.bytes) for b in context.buffers] == [
        ("a", "float16", "input", 2000),
        ("b", "float32", "input", 2400),
        ("c", "float16", "output", 2000),
    ]


def test_the_options_of_the_command_reach_the_evidence(tmp_path):
    from kopt_core.records import to_data
    from kopt_core.records.roofline import DEFAULT_CEILINGS

    ceilings = {**to_data(DEFAULT_CEILINGS), "bandwidth_bytes_per_s": 3.0e12, "source": "a test file"}
    path = tmp_path / "ceilings.json"
    path.write_text(json.dumps(ceilings))
    csv = FIXTURES / "naive_full_raw.csv"
    dims = ("--M=2048", "--N=2048", "--K=2048")
    proc = kopt(
        "profile",
        "--import",
        csv,
        "--ref",
        SGEMM / "ref.py",
        *dims,
        "--ncu-num",
        2,
        "--ceilings",
        path,
        "--out",
        tmp_path / "out",
    )
    assert proc.returncode == 0, proc.stderr
    top = json.loads((tmp_path / "out" / "ncu_top.json").read_text())
    assert top["ncu_num"] == 2 and max(len(rows) for rows in top["axes"].values()) == 2
    roofline = json.loads((tmp_path / "out" / "roofline.json").read_text())
    assert roofline["label"] == "roofline" and roofline["ceilings"]["source"] == "a test file"
    path.write_text("{not json")
    proc = kopt("profile", "--import", csv, "--ceilings", path, "--out", tmp_path / "bad")
    assert proc.returncode == 4 and "ceilings file" in proc.stderr

"""The roofline picture: a PNG for the roofline and for the heuristic (CPU, Agg)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("matplotlib")

from kopt_core.records.roofline import DEFAULT_CEILINGS  # noqa: E402
from kopt_core.roofline import compute_roofline  # noqa: E402
from kopt_core.roofline.plot import plot_roofline  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SGEMM = {"flops": 2.0 * 2048**3, "bytes_min": 12.0 * 2048**2}


def _is_png(path):
    data = path.read_bytes()
    return len(data) > 5000 and data.startswith(PNG_MAGIC)


def test_roofline_png(tmp_path):
    r = compute_roofline(
        {"warp_stall_long_scoreboard_pct": 35.0},
        duration_ms=3.140224,
        workload=SGEMM,
        ceilings=DEFAULT_CEILINGS,
        peak_dtype="float32",
    )
    out = plot_roofline(r, tmp_path / "plots" / "roofline.png")
    assert out == tmp_path / "plots" / "roofline.png"
    assert _is_png(out)


def test_below_floor_and_unknown_peak_png(tmp_path):
    fast = compute_roofline(
        {}, duration_ms=0.1, workload=SGEMM, ceilings=DEFAULT_CEILINGS, peak_dtype="float32"
    )
    assert fast.below_floor
    assert _is_png(plot_roofline(fast, tmp_path / "fast.png"))
    no_peak = compute_roofline(
        {}, duration_ms=3.0, workload=SGEMM, ceilings=DEFAULT_CEILINGS, peak_dtype=None
    )
    assert _is_png(plot_roofline(no_peak, tmp_path / "no_peak.png"))


def test_heuristic_png(tmp_path):
    metrics = {"sm_throughput_pct": 65.5, "memory_throughput_pct": 30.0, "warp_stall_wait_pct": None}
    r = compute_roofline(metrics, duration_ms=None, workload=None, ceilings=None, peak_dtype=None)
    assert _is_png(plot_roofline(r, tmp_path / "heuristic.png"))


def test_copy_kernel_without_flops_draws_gaps(tmp_path):
    r = compute_roofline(
        {},
        duration_ms=0.05,
        workload={"flops": 0, "bytes_min": 2e8},
        ceilings=DEFAULT_CEILINGS,
        peak_dtype="float32",
    )
    assert _is_png(plot_roofline(r, tmp_path / "copy.png"))


def test_plot_module_has_no_import_side_effects():
    # importing the module must not import matplotlib, and drawing must not pull in pyplot or switch
    # the global backend
    code = (
        "import sys; import kopt_core.roofline.plot as p; assert 'matplotlib' not in sys.modules;"
        "import matplotlib; before = dict.__getitem__(matplotlib.rcParams, 'backend');"
        "from kopt_core.roofline import compute_roofline;"
        "r = compute_roofline({}, duration_ms=None, workload=None, ceilings=None, peak_dtype=None);"
        "p.plot_roofline(r, sys.argv[1]);"
        "assert 'matplotlib.pyplot' not in sys.modules;"
        "assert dict.__getitem__(matplotlib.rcParams, 'backend') == before"
    )
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", code, os.path.join(tmp, "x.png")], check=True)

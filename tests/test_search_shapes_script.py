"""bench/search_shapes.py, on the CPU: a search that cannot run here (no GPU) is a row that says why, never
a share of torch; the table marks a share at or above its target and shows how far the named median is
from bench's (the GPU numbers are docs/validation.md's)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import search_shapes  # noqa: E402


def test_shapes_become_dims_and_the_sweep_has_four_shapes_with_the_issue_s_two():
    assert search_shapes.dims_of("8192x8192x2048") == ["--M=8192", "--N=8192", "--K=2048"]
    assert len(search_shapes.SHAPES) >= 4
    assert "8192x8192x2048" in search_shapes.SHAPES
    assert any(shape.endswith("x8192") for shape in search_shapes.SHAPES)  # one with K = 8192


def row(share: float, named_vs_bench: float, **changes) -> dict:
    torch_ms = 1.0
    base = {
        "search": "cutlass", "shape": "4096x4096x4096", "target": 0.95, "evaluated": 8, "failures": 1,
        "trials_per_minute": 2.5, "best_label": "tile 128x256", "search_median_ms": 1.01,
        "named_median_ms": (1 + named_vs_bench) * torch_ms / share, "bench_ms": torch_ms / share,
        "torch_ms": torch_ms, "share_of_torch": share, "named_vs_bench": named_vs_bench,
    }  # fmt: skip
    return {**base, **changes}


def test_the_table_marks_only_the_shares_that_meet_their_target():
    table = search_shapes.table([row(0.96, -0.004), row(0.9, 0.031, shape="8192x8192x2048")])
    met, missed = table.splitlines()[2:]
    assert "**96.0%** (target 95%)" in met and "| -0.4% |" in met
    assert "| 90.0% (target 95%)" in missed and "**" not in missed and "| +3.1% |" in missed
    assert "| 8 (1) |" in met  # trials evaluated, and how many failed


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the SGEMM example builds with nvcc")
def test_a_search_that_cannot_run_here_is_a_row_with_its_error(tmp_path, capsys):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("with a GPU the search would run for minutes")
    assert search_shapes.main(["--out", str(tmp_path), "--only", "sgemm", "--trials", "2"]) == 0
    (saved,) = tmp_path.glob("sgemm_*.json")
    found = json.loads(saved.read_text())
    assert found["error"].startswith("kopt search exited 3")  # no GPU: a hardware failure, exit 3
    assert "share_of_torch" not in found
    assert "| sgemm | 4096x4096x4096 | kopt search exited 3" in capsys.readouterr().out

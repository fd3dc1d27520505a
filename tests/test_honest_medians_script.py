"""bench/honest_medians.py, on the CPU: its ABBA order, its figure, and that a run it cannot time is a
miss, never a pass (the GPU numbers are docs/validation.md's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import honest_medians  # noqa: E402

CASE = honest_medians.CASES["vector_scale_64m"]


def _run(side: str, median: float | None, returncode: int = 0) -> dict:
    return {"side": side, "median_ms": median, "returncode": returncode, "mode": "per_launch"}


def test_rounds_alternate_which_tree_goes_first():
    assert honest_medians.order(4) == [("new", "old"), ("old", "new"), ("new", "old"), ("old", "new")]


def test_the_change_is_the_ratio_of_the_medians_and_the_target_is_one_percent():
    assert honest_medians.change([1.0, 1.02, 5.0], [1.0]) == pytest.approx(0.02)
    assert honest_medians.change([], [1.0]) is None
    inside = [_run("new", 1.009), _run("old", 1.0), _run("old", 1.0), _run("new", 1.009)]
    outside = [_run("new", 0.989), _run("old", 1.0)]
    assert honest_medians.evaluate(CASE, inside)["met"]
    row = honest_medians.evaluate(CASE, outside)
    assert not row["met"] and row["change"] == pytest.approx(-0.011)


def test_a_failed_run_is_a_miss_even_when_the_others_agree():
    runs = [_run("new", 1.0), _run("old", 1.0), _run("new", None, returncode=3)]
    row = honest_medians.evaluate(CASE, runs)
    assert row["failed_runs"] == 1 and not row["met"]
    assert "MISSED (1 runs failed)" in honest_medians.render([row])


def test_an_old_tree_without_kopt_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as raised:
        honest_medians.main(["--old", str(tmp_path)])
    assert raised.value.code == 2 and "holds no kopt_core/" in capsys.readouterr().err

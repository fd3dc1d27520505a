"""GPU validation of the executor seam (issue 29): on one H200, the `gpus` executor (one worker pinned
with CUDA_VISIBLE_DEVICES) gives the same verdicts and the same times as `local` (the process's shared
worker) for the same search: the grid sampler with one seed proposes the same configurations in the same
order to both, each is checked and timed by the same harness, and only the worker differs.

Run with `pytest -m gpu -s tests/gpu/test_executors_gpu.py`: -s prints each configuration's two medians
for docs/validation.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "examples/cuda/sgemm_tiled/kernel.cu"
REF = REPO / "examples/cuda/sgemm_tiled/ref.py"
DIMS = ["--M=2048", "--N=2048", "--K=2048"]
TRIALS = 10


def search(out: Path, executor: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", "search", str(KERNEL), "--ref", str(REF), *DIMS]
        + ["--sampler", "grid", "--seed", "3", "--trials", str(TRIALS), "--out", str(out), "--json"]
        + ["--executor", executor],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["result"]


def test_the_gpus_executor_gives_the_verdicts_and_times_of_the_local_one(tmp_path):
    local = search(tmp_path / "local", "local")
    gpus = search(tmp_path / "gpus", "gpus")
    assert local["executor"] == "local" and gpus["executor"] == "gpus"
    assert len(gpus["workers"]) == 1 and gpus["workers"][0].startswith("cuda:")
    rows = {}
    for name, result in (("local", local), ("gpus", gpus)):
        for trial in json.loads(Path(result["trials_json"]).read_text())["trials"]:
            rows.setdefault(trial["config_id"], {})[name] = trial
    assert all(len(both) == 2 for both in rows.values()), "the two searches evaluated other configurations"
    ratios = []
    print(f"\n{'configuration':44} {'local':>9} {'gpus':>9} {'gpus/local':>10}")
    for both in rows.values():
        verdicts = {name: (trial["status"], trial["detail"]) for name, trial in both.items()}
        assert both["local"]["status"] == both["gpus"]["status"], verdicts  # the same verdict
        if both["local"]["status"] == "ok":
            ratio = both["gpus"]["value_ms"] / both["local"]["value_ms"]
            ratios.append(ratio)
            config = ", ".join(f"{k}={v}" for k, v in both["local"]["config"].items())
            print(
                f"{config:44} {both['local']['value_ms']:9.4f} {both['gpus']['value_ms']:9.4f} {ratio:10.4f}"
            )
    assert len(ratios) >= TRIALS // 2
    middle = statistics.median(ratios)
    print(f"median gpus/local {middle:.4f}, worst {max(ratios, key=lambda r: abs(r - 1)):.4f}")
    assert abs(middle - 1) <= 0.02  # the same times: within the harness's run-to-run noise
    assert all(abs(r - 1) <= 0.06 for r in ratios)
    assert local["best"]["config_id"] == gpus["best"]["config_id"] or (
        abs(local["best"]["median_ms"] / gpus["best"]["median_ms"] - 1) <= 0.02
    )

"""GPU tests of the torch backend: ``kopt suite`` over bundled KernelBench-format problems on the H200,
a fused Triton and a load_inline CUDA solution faster than eager, and cheats rejected with their class.

Runs the real CLI in a subprocess and reads the suite.json it writes. Run on a GPU machine with
``pytest -m gpu -s tests/gpu/test_torch_gpu.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

PROBLEMS = Path(__file__).resolve().parents[2] / "examples" / "torch_problems"

# (problem, solution, the failure class expected or None for a correct row faster than eager)
PAIRS = (
    ("level2/04_scale_shift_swish.py", "solutions/scale_shift_swish__triton.py", None),
    ("level1/07_rms_norm.py", "solutions/rms_norm__cuda.py", None),
    ("level1/01_relu.py", "solutions/relu__zeros.py", "wrong_output"),
    ("level1/01_relu.py", "solutions/relu__inplace.py", "wrote_inputs"),
    ("level1/03_hardtanh.py", "solutions/hardtanh__side_stream.py", "escaped_stream"),
)


def test_the_suite_on_the_gpu_times_real_wins_and_names_each_cheat(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            [
                {"problem": str(PROBLEMS / problem), "solution": str(PROBLEMS / solution)}
                for problem, solution, _ in PAIRS
            ]
        )
    )
    out = tmp_path / "suite"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kopt_core.cli",
            "suite",
            "--manifest",
            str(manifest),
            "--out",
            str(out),
            "--budget-s",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    print(done.stdout[-4000:], done.stderr[-4000:])
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        (Path(r["problem"]).name, Path(r["solution"]).name): r
        for r in json.loads((out / "suite.json").read_text())["rows"]
    }
    for problem, solution, failure in PAIRS:
        row = rows[(Path(problem).name, Path(solution).name)]
        if failure is None:
            assert row["correct"] and row["speedup"] > 1.3, row
        else:
            assert not row["correct"] and row["failure"] == failure and row["speedup"] is None, row

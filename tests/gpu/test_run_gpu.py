"""GPU tests of the run folder: gate, init, seed and iter open on a CUDA, a CUTLASS and a Triton example
produce the run layout of docs/loop.md; a baseline that fails correctness stops the run with exit 2."""

from __future__ import annotations

import json
import os
import shutil
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


def kopt(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kopt_core.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


@pytest.fixture(scope="module")
def env_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gate") / "env.json"
    done = kopt("gate", "--out", path, "--backend", "cuda")
    assert done.returncode == 0, done.stderr
    return path


def start_run(tmp_path: Path, kernel: Path, ref: Path, env_json: Path, *dims: str) -> Path:
    shutil.copy(kernel, tmp_path / kernel.name)
    done = kopt("init", "--baseline", tmp_path / kernel.name, "--ref", ref, "--env", env_json, *dims)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


CASES = [
    (
        EXAMPLES / "cuda" / "vector_scale" / "kernel.cu",
        EXAMPLES / "cuda" / "vector_scale" / "ref.py",
        ("--N=67108864",),
    ),
    (
        EXAMPLES / "cutlass" / "gemm_sm80_tensorop" / "kernel.cu",
        EXAMPLES / "cutlass" / "gemm_sm80_tensorop" / "ref.py",
        ("--M=4096", "--N=4096", "--K=4096"),
    ),
    (
        EXAMPLES / "triton" / "softmax" / "kernel.py",
        EXAMPLES / "triton" / "softmax" / "ref.py",
        ("--M=8192", "--N=8192"),
    ),
]


@pytest.mark.parametrize("kernel, ref, dims", CASES, ids=["cuda", "cutlass", "triton"])
def test_seed_and_open_produce_the_seed_layout(tmp_path, env_json, kernel, ref, dims):
    run = start_run(tmp_path, kernel, ref, env_json, *dims)
    seeded = kopt("seed", "--state", run / "state.json")
    assert seeded.returncode == 0, seeded.stderr
    opened = kopt("iter", "open", "--state", run / "state.json", "--iter", "1")
    assert opened.returncode == 0, opened.stderr
    for name in (
        "env.json",
        "state.json",
        "summary.md",
        "baseline/bench.json",
        "baseline/baseline.ncu-rep",
        f"baseline/{kernel.name}",
        "iterv1/best_input.ncu-rep",
        "iterv1/ncu_top.json",
        "iterv1/roofline.json",
    ):
        assert (run / name).is_file(), name
    assert not list(run.glob(".staging_*")) and not (run / "iterv2").exists()
    state = json.loads((run / "state.json").read_text())
    assert state["run_status"] == "running" and state["best_metric_ms"] > 0
    baseline_bundle = json.loads((run / "baseline" / "profile.json").read_text())["bundle"]
    assert json.loads((run / "iterv1" / "profile.json").read_text())["bundle"] == baseline_bundle
    # the profile kept the kernel's SASS, and selection reads the kernel's traits from it
    assert json.loads((run / "iterv1" / "profile.json").read_text())["sass"] == {
        "file": "best_input.sass",
        "error": None,
    }
    selected = kopt("select", "--state", run / "state.json", "--iter", "1")
    assert selected.returncode == 0, selected.stderr
    methods = json.loads((run / "iterv1" / "methods.json").read_text())
    tags = methods["kernel_tags"]
    assert None not in (tags["tensor_core_mma"], tags["shared_memory_staging"])  # read, not unknown
    assert tags["tensor_core_mma"] is (kernel.parent.name == "gemm_sm80_tensorop")
    if kernel.parent.name != "softmax":  # a Triton row reduction may exchange partials through shared memory
        assert tags["shared_memory_staging"] is (kernel.parent.name == "gemm_sm80_tensorop")
    print(
        f"\n[{kernel.parent.name}] baseline {state['best_metric_ms']:.4f} ms; "
        f"roofline {json.loads((run / 'iterv1' / 'roofline.json').read_text())['axis_budget']}; "
        f"selected {[p['id'] for p in methods['selected']]}"
    )


def test_a_baseline_that_fails_correctness_stops_with_exit_2(tmp_path, env_json):
    run = start_run(tmp_path, KERNELS / "wrong.cu", KERNELS / "scale_ref.py", env_json, "--N=1048576")
    seeded = kopt("seed", "--state", run / "state.json")
    assert seeded.returncode == 2
    assert json.loads((run / "stop.json").read_text())["exit_code"] == 2
    assert "## Stopped" in (run / "summary.md").read_text() and not (run / "iterv1").exists()

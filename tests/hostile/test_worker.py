"""A bench worker that ends without a result (an exit from the kernel, a signal, no RESULT.json) is
reported in bench.json's ``error`` with the stage it was in, never as status "error" with no error; and
CUDA error codes are named by the library's own runtime. On the CPU with the example PyTorch backend."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kopt_example_backend
from kopt_core.records import BenchOptions
from kopt_core.steps.bench import bench_kernel, exit_code

REPO = Path(__file__).resolve().parents[2]
FAST = BenchOptions(seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, timeout_s=120)

REF = """
atol = 1e-6
rtol = 1e-6

def buffers(N):
    return {"x": {"shape": (N,), "dtype": "float32", "role": "input"},
            "y": {"shape": (N,), "dtype": "float32", "role": "output"}}

def reference(x, y, N):
    y.copy_(2.5 * x)
"""


def kernel_ending_on_call(n: int, how: str) -> str:
    """A correct saxpy whose solve ends the process (``how``) on its ``n``-th call."""
    return textwrap.dedent(
        f"""\
        import os
        import signal

        import torch

        calls = [0]


        def solve(x, y, N: int):
            calls[0] += 1
            if calls[0] == {n}:
                {how}
            torch.mul(x, 2.5, out=y)
        """
    )


@pytest.fixture
def bench(make_pm, tmp_path):
    pm = make_pm(kopt_example_backend)

    def run(kernel_text: str):
        (tmp_path / "kernel.py").write_text(kernel_text)
        (tmp_path / "ref.py").write_text(textwrap.dedent(REF))
        return bench_kernel(pm, tmp_path / "kernel.py", tmp_path / "ref.py", {"N": 4096}, options=FAST)

    return run


@pytest.mark.parametrize(
    "how, words",
    [
        ("os._exit(0)", "exited (exit code 0) before it finished"),
        ("exit(0)", "told to exit (exit(0))"),
        ("os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL, signal 9"),
        ("os._exit(3)", "exit code 3"),
    ],
)
@pytest.mark.parametrize("call, stage", [(1, "correctness"), (5, "timing")])
def test_a_worker_that_ends_without_a_result_says_how_and_in_which_stage(bench, how, words, call, stage):
    result = bench(kernel_ending_on_call(call, how))
    assert exit_code(result) == 2 and result.status == "failed"
    assert result.error is not None and result.error_stage == "worker"
    assert words in result.error, result.error
    assert f"stage {stage}" in result.error, result.error
    assert not result.timing_valid


def test_a_worker_that_finishes_still_reports_no_error(bench):
    result = bench(kernel_ending_on_call(10**9, "pass"))
    assert exit_code(result) == 0, result.error
    assert result.status == "ok" and result.error is None and result.error_stage is None


def test_kopt_bench_writes_the_early_exit_into_bench_json(tmp_path):
    """The case of the issue: solve calls exit(0) on its fifth call; bench.json said status "error",
    error null, error_stage null."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "kernel.py").write_text(kernel_ending_on_call(5, "os._exit(0)"))
    (work / "ref.py").write_text(textwrap.dedent(REF))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kopt_core.cli",
            "bench",
            work / "kernel.py",
            "--ref",
            work / "ref.py",
            "--N=4096",
            "--seeds",
            "0,1",
            "--warmup-ms",
            "5",
            "--budget-s",
            "0.2",
            "--out",
            work / "bench.json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=work,
        env=dict(os.environ, KOPT_PLUGINS="pytorch", COLUMNS="400", TMPDIR=str(tmp_path)),
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in work.iterdir()) == ["bench.json", "kernel.py", "ref.py"]
    bench = json.loads((work / "bench.json").read_text())
    assert bench["status"] == "failed" and bench["error_stage"] == "worker"
    assert "exit code 0" in bench["error"] and "stage timing" in bench["error"]
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith("kopt-bench-")]
    assert not leftovers  # the worker's scratch folder is removed


# ------------------------------------------------------------------------------------------- CUDA errors


@pytest.fixture(scope="module")
def shim_library(tmp_path_factory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("nvcc is not on PATH")
    folder = tmp_path_factory.mktemp("shim")
    library = folder / "lib.so"
    subprocess.run(
        [nvcc, "-shared", "-Xcompiler", "-fPIC", "-o", library, REPO / "kopt_cuda" / "shim" / "kopt_shim.cu"],
        check=True,
        capture_output=True,
        timeout=600,
        cwd=folder,
    )
    return library


@pytest.mark.nvcc
def test_cuda_errors_are_named_by_the_shim(shim_library):
    from kopt_cuda.launch import cuda_error

    lib = ctypes.CDLL(str(shim_library))
    assert cuda_error(lib, 2) == "CUDA error 2 (cudaErrorMemoryAllocation: out of memory)"
    assert "cudaErrorIllegalAddress" in cuda_error(lib, 700)


@pytest.mark.nvcc
def test_a_failing_shim_call_reads_error_then_name_then_function(shim_library):
    from kopt_core.bench.launchers import LaunchError
    from kopt_cuda.launch import _call

    lib = ctypes.CDLL(str(shim_library))
    failing = lib.kopt_shim_error_text  # returns the code it is given: a call that "fails" with 2
    failing.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    with pytest.raises(LaunchError) as info:
        _call(lib, failing, 2, None, 0)
    assert str(info.value) == (
        "CUDA error 2 (cudaErrorMemoryAllocation: out of memory) in kopt_shim_error_text"
    )


def test_a_library_built_before_the_shim_named_errors_gives_the_code():
    from kopt_cuda.launch import cuda_error

    libc = ctypes.CDLL(None)  # has no kopt_shim_error_text
    assert cuda_error(libc, 2) == "CUDA error 2"

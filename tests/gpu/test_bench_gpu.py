"""GPU tests of `kopt bench`: the harness must pass a correct kernel and catch each way of cheating.

Each test runs the real CLI in a subprocess, as a user would, on a kernel from tests/gpu_kernels/ (all
sharing scale_ref.py: y = 2.5 * x) or examples/cuda/, and reads the BenchResult it prints with --json.
Run on a GPU machine with `pytest -m gpu tests/gpu`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "tests" / "gpu_kernels"
SCALE_REF = KERNELS / "scale_ref.py"
EXAMPLES = REPO / "examples" / "cuda"
N_1M = "--N=1048576"

EXIT_OK = 0
EXIT_KERNEL_FAILED = 2


def run_bench(
    kernel: str | Path,
    ref: str | Path,
    *dims: str,
    extra: tuple[str, ...] | list[str] = (),
    timeout_s: float = 60,
    wall_limit_s: float = 900,
) -> tuple[int, dict[str, Any] | None, str]:
    """Run `kopt bench` on one kernel; return (exit code, the --json document or None, stderr).

    dims are written as on the command line ("--N=1048576"; "N=1048576" gets the dashes added).
    timeout_s is kopt's own worker timeout; wall_limit_s only keeps a broken CLI from hanging pytest.
    """
    dim_args = [d if d.startswith("--") else f"--{d}" for d in dims]
    command = [
        sys.executable,
        "-m",
        "kopt_core.cli",
        "bench",
        str(kernel),
        "--ref",
        str(ref),
        *dim_args,
        "--json",
        "--budget-s",
        "0.5",
        "--timeout-s",
        str(timeout_s),
        *extra,
    ]
    env = dict(os.environ)
    # The checkout is importable as installed (kopt_core's folder is the package), also when it is not.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=wall_limit_s, check=False
    )
    return proc.returncode, _parse_json(proc.stdout), proc.stderr


def _parse_json(stdout: str) -> dict[str, Any] | None:
    """The BenchResult: the result of the --json envelope on stdout, which is the only thing there."""
    try:
        return json.loads(stdout)["result"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


def _explain(rc: int, result: dict[str, Any] | None, stderr: str) -> str:
    """What to show when an assertion fails: the exit code, the error, and the end of stderr."""
    error = None if result is None else (result.get("error_stage"), result.get("error"))
    return f"exit {rc}; error {error}; stderr tail:\n{stderr[-3000:]}"


def _buffer_checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every per-buffer check of every correctness run."""
    return [buf for check in result.get("correctness") or [] for buf in check.get("buffers") or []]


def _assert_passed(rc: int, result: dict[str, Any] | None, stderr: str) -> dict[str, Any]:
    """A kernel kopt accepted: exit 0, checked correct, timed, and a positive median."""
    why = _explain(rc, result, stderr)
    assert rc == EXIT_OK, why
    assert result is not None, why
    assert result["status"] == "ok", why
    assert result["correctness_pass"] is True, why
    assert result["timing_valid"] is True, why
    assert result["kernel_timing"]["median_ms"] > 0, why
    return result


def _assert_failed(rc: int, result: dict[str, Any] | None, stderr: str) -> dict[str, Any]:
    """A kernel kopt rejected: exit 2, with a BenchResult saying it is not correct."""
    why = _explain(rc, result, stderr)
    assert rc == EXIT_KERNEL_FAILED, why
    assert result is not None, why
    assert result["correctness_pass"] is False, why
    assert result["status"] == "failed", why
    return result


def test_correct_kernel_passes_and_is_timed() -> None:
    result = _assert_passed(*run_bench(KERNELS / "correct.cu", SCALE_REF, N_1M))
    assert all(check["passed"] for check in result["correctness"])
    assert isinstance(result["speedup_vs_reference"], float)
    assert result["speedup_vs_reference"] > 0


def test_wrong_result_is_rejected_with_mismatches() -> None:
    rc, result, stderr = run_bench(KERNELS / "wrong.cu", SCALE_REF, N_1M)
    result = _assert_failed(rc, result, stderr)
    assert any(buf["mismatches"] > 0 for buf in _buffer_checks(result)), _explain(rc, result, stderr)


def test_unwritten_tail_is_caught_by_poisoned_outputs() -> None:
    rc, result, stderr = run_bench(KERNELS / "partial_write.cu", SCALE_REF, N_1M)
    result = _assert_failed(rc, result, stderr)
    # The kernel skips exactly the last 1000 elements of y: they keep the poison (NaN, counted in
    # nan_count) or, when kopt tries zeroed outputs, keep zeros (counted as mismatches).
    y_checks = [buf for buf in _buffer_checks(result) if buf["buffer"] == "y"]
    assert y_checks, _explain(rc, result, stderr)
    assert all(not buf["passed"] for buf in y_checks)
    assert all(max(buf["mismatches"], buf["nan_count"]) >= 1000 for buf in y_checks), y_checks


def test_kernel_that_writes_its_input_is_rejected() -> None:
    rc, result, stderr = run_bench(KERNELS / "writes_input.cu", SCALE_REF, N_1M)
    result = _assert_failed(rc, result, stderr)
    assert any(check["inputs_unchanged"] is False for check in result["correctness"]), _explain(
        rc, result, stderr
    )


def test_kernel_that_only_works_on_its_first_call_is_rejected() -> None:
    rc, result, stderr = run_bench(KERNELS / "first_call_only.cu", SCALE_REF, N_1M)
    result = _assert_failed(rc, result, stderr)
    why = _explain(rc, result, stderr)
    checks = result["correctness"]
    # Seed 0 is the kernel's first call: it does the work and passes. Seed 1 (default seeds 0,1,2) is its
    # second call, which launches nothing: the poisoned output fails, and so does the zeroed retry. So it is
    # caught before timing, at seed 1, and never timed (docs/validation.md: "exit 2 at seed 1").
    assert [(c["seed"], c["phase"], c["output_init"], c["passed"]) for c in checks] == [
        (0, "before_timing", "poisoned", True),
        (1, "before_timing", "poisoned", False),
        (1, "before_timing", "zeroed", False),
    ], why
    assert result["error_stage"] == "correctness", why
    assert (result["error"] or "").startswith("seed 1: "), why
    assert result["timing_valid"] is False and result.get("kernel_timing") is None, why


def test_illegal_address_fails_the_kernel_not_kopt() -> None:
    rc, result, stderr = run_bench(KERNELS / "illegal_address.cu", SCALE_REF, N_1M)
    why = _explain(rc, result, stderr)
    assert rc == EXIT_KERNEL_FAILED, why
    assert result is not None, why
    assert result["status"] == "failed", why
    assert result["correctness_pass"] is False, why
    assert "illegal" in (result["error"] or "").lower(), why
    # The crash took down only that worker: the GPU and kopt still run the next kernel.
    _assert_passed(*run_bench(KERNELS / "correct.cu", SCALE_REF, N_1M))


def test_endless_kernel_is_stopped_by_the_timeout() -> None:
    started = time.monotonic()
    rc, result, stderr = run_bench(
        KERNELS / "endless_loop.cu", SCALE_REF, N_1M, timeout_s=20, wall_limit_s=120
    )
    elapsed = time.monotonic() - started
    why = _explain(rc, result, stderr)
    assert rc == EXIT_KERNEL_FAILED, why
    assert result is not None, why
    assert result["status"] == "failed", why
    error = (result["error"] or "").lower()
    assert "timeout" in error or "timed out" in error, why
    assert elapsed < 60, f"kopt took {elapsed:.1f} s to give up on a kernel with --timeout-s 20"


def test_example_vector_scale_passes() -> None:
    example = EXAMPLES / "vector_scale"
    _assert_passed(*run_bench(example / "kernel.cu", example / "ref.py", "--N=16777216"))


def test_example_sgemm_naive_passes_with_its_declared_buffers() -> None:
    example = EXAMPLES / "sgemm_naive"
    result = _assert_passed(
        *run_bench(example / "kernel.cu", example / "ref.py", "--M=1024", "--N=1024", "--K=1024")
    )
    shapes = {buf["name"]: tuple(buf["realised_shape"]) for buf in result["buffers"]}
    assert shapes == {"A": (1024, 1024), "B": (1024, 1024), "C": (1024, 1024)}, result["buffers"]


def test_example_reduce_sum_passes_and_needs_zeroed_outputs() -> None:
    # A plain-contract fixture: output has N elements by the default sizing rule, only output[0] is written,
    # so it passes only with outputs that start zeroed, and kopt must say so.
    example = EXAMPLES / "reduce_sum"
    result = _assert_passed(*run_bench(example / "kernel.cu", example / "ref.py", N_1M))
    assert result["outputs_must_start_zeroed"] is True, result["correctness"]

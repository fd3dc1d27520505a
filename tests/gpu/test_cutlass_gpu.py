"""GPU tests of `kopt bench` on the bundled CUTLASS examples and their deliberately wrong variants.

Each test runs the real CLI in a subprocess at M = N = K = 4096, as a user would, and reads the
BenchResult it prints with --json. The two examples must pass and be timed (their median time and
TFLOP/s are printed: run with `pytest -s -m gpu tests/gpu/test_cutlass_gpu.py` to see them); the wrong
variants (alpha = 0.5; the last k tile dropped) must be rejected with mismatches.

The CUTLASS headers come from CUTLASS_PATH / CUTLASS_INCLUDE_DIR or the nvidia-cutlass wheel. The four
kernels are built once, in parallel, into a build cache that the CLI subprocesses then hit (the Hopper
kernel alone takes about a minute of nvcc).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from kopt_cutlass.headers import discover  # noqa: E402 (after the GPU skip, like the imports it guards)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "cutlass"
WRONG = REPO / "tests" / "gpu_kernels" / "cutlass"
SM80 = EXAMPLES / "gemm_sm80_tensorop"
SM90 = EXAMPLES / "gemm_sm90_tma_ws"
M = N = K = 4096
DIMS = (f"--M={M}", f"--N={N}", f"--K={K}")

EXIT_OK = 0
EXIT_KERNEL_FAILED = 2

HEADERS, SEARCHED = discover()
if HEADERS is None:
    pytest.skip(
        "CUTLASS headers not found (set CUTLASS_PATH or pip install nvidia-cutlass); searched: "
        + "; ".join(SEARCHED),
        allow_module_level=True,
    )

KERNELS = {
    "sm80": SM80 / "kernel.cu",
    "sm90": SM90 / "kernel.cu",
    "sm80_wrong": WRONG / "gemm_sm80_wrong.cu",
    "sm90_wrong": WRONG / "gemm_sm90_wrong.cu",
}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """A build cache holding all four kernels, built concurrently; the CLI runs below hit it.

    A build that fails here is not an error of this fixture: the CLI run of that kernel builds it again
    and reports the failure in its own words.
    """
    import kopt_cutlass.plugin
    from kopt_core.hardware import arch_for_capability
    from kopt_core.records import Candidate, Toolchain

    cache = tmp_path_factory.mktemp("kopt-build-cache")
    major, minor = torch.cuda.get_device_capability()
    toolchain = Toolchain(arch=arch_for_capability(f"{major}.{minor}"), cache_dir=str(cache))

    def build(item: tuple[str, Path]) -> None:
        name, path = item
        build_dir = tmp_path_factory.mktemp(f"build-{name}")
        try:
            kopt_cutlass.plugin.kopt_compile(
                candidate=Candidate(path=str(path), backend="cutlass"),
                build_dir=build_dir,
                toolchain=toolchain,
            )
        except Exception as exc:  # reported again, properly, by the CLI run
            print(f"\nprebuild of {name} failed ({type(exc).__name__}); the CLI will rebuild it")

    with ThreadPoolExecutor(max_workers=len(KERNELS)) as pool:
        list(pool.map(build, KERNELS.items()))
    return cache


def run_bench(kernel: Path, ref: Path, cache: Path) -> tuple[int, dict[str, Any] | None, str]:
    """Run `kopt bench` on one kernel at 4096^3; return (exit code, the --json document or None, stderr)."""
    command = [
        sys.executable,
        "-m",
        "kopt_core.cli",
        "bench",
        str(kernel),
        "--ref",
        str(ref),
        *DIMS,
        "--json",
        "--budget-s",
        "1",
        "--timeout-s",
        "600",
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["KOPT_CACHE_DIR"] = str(cache)
    proc = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500, check=False
    )
    return proc.returncode, _parse_json(proc.stdout), proc.stderr


def _parse_json(stdout: str) -> dict[str, Any] | None:
    """The BenchResult: the result of the --json envelope on stdout, which is the only thing there."""
    try:
        return json.loads(stdout)["result"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


def _explain(rc: int, result: dict[str, Any] | None, stderr: str) -> str:
    error = None if result is None else (result.get("error_stage"), result.get("error"))
    return f"exit {rc}; error {error}; stderr tail:\n{stderr[-3000:]}"


def _report(name: str, result: dict[str, Any]) -> None:
    """One line per kernel for `pytest -s`: median time, TFLOP/s, the reference's time, the build."""
    median_ms = result["kernel_timing"]["median_ms"]
    tflops = 2 * M * N * K / (median_ms * 1e-3) / 1e12
    reference = result.get("reference_timing") or {}
    build = result.get("build") or {}
    registers = [r.get("registers") for r in build.get("resources") or [] if r.get("registers")]
    line = f"\n{name}: median {median_ms:.4f} ms, {tflops:.1f} TFLOP/s (fp16, M=N=K={M})"
    if reference.get("median_ms"):
        line += f"; reference {reference['median_ms']:.4f} ms, speedup {result.get('speedup_vs_reference')}"
    if registers:
        line += f"; registers {registers}"
    if build:
        line += f"; build cache hit {build.get('cache_hit')}"
    print(line)


@pytest.mark.parametrize(("name", "ref"), [("sm80", SM80 / "ref.py"), ("sm90", SM90 / "ref.py")])
def test_cutlass_example_is_correct_and_timed(cache_dir, name, ref) -> None:
    rc, result, stderr = run_bench(KERNELS[name], ref, cache_dir)
    why = _explain(rc, result, stderr)
    assert rc == EXIT_OK, why
    assert result is not None, why
    assert result["status"] == "ok", why
    assert result["correctness_pass"] is True, why
    assert all(check["passed"] for check in result["correctness"]), why
    assert result["timing_valid"] is True, why
    assert result["kernel_timing"]["median_ms"] > 0, why
    assert result["backend"] == "cutlass", why
    _report(name, result)


@pytest.mark.parametrize(("name", "ref"), [("sm80_wrong", SM80 / "ref.py"), ("sm90_wrong", SM90 / "ref.py")])
def test_wrong_cutlass_variant_is_rejected_with_mismatches(cache_dir, name, ref) -> None:
    rc, result, stderr = run_bench(KERNELS[name], ref, cache_dir)
    why = _explain(rc, result, stderr)
    assert rc == EXIT_KERNEL_FAILED, why
    assert result is not None, why
    assert result["status"] == "failed", why
    assert result["correctness_pass"] is False, why
    checks = [buf for check in result.get("correctness") or [] for buf in check.get("buffers") or []]
    c_checks = [buf for buf in checks if buf["buffer"] == "C"]
    assert c_checks and any(buf["mismatches"] > 0 for buf in c_checks), why
    print(
        f"\n{name}: rejected, {max(buf['mismatches'] for buf in c_checks)} of {M * N} elements of C mismatch"
    )

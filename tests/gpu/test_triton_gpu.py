"""GPU tests of `kopt bench` on Triton kernels: the bundled examples pass and are timed, their wrong
variants fail, an autotuned kernel is pinned after one autotune pass, and the cubins Triton built are
found for SASS inspection.

Each test runs the real CLI in a subprocess, as a user would, and reads the BenchResult it prints with
--json. Run on a GPU machine with `pytest -m gpu -s tests/gpu/test_triton_gpu.py` (-s shows the timings).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "triton"
WRONG = REPO / "tests" / "gpu_kernels" / "triton"

EXIT_OK = 0
EXIT_KERNEL_FAILED = 2

CASES = {
    "vector_add": {"N": 67108864},
    "softmax": {"M": 8192, "N": 8192},
    "matmul": {"M": 4096, "N": 4096, "K": 4096},
    "matmul_autotune": {"M": 4096, "N": 4096, "K": 4096},
}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """A build cache of this module's own, so every kernel is compiled (and its cubins written) here."""
    return tmp_path_factory.mktemp("kopt_builds")


def run_bench(
    kernel: Path, ref: Path, dims: dict, cache: Path, timeout_s: float = 300, wall_limit_s: float = 900
) -> tuple[int, dict[str, Any] | None, str]:
    """Run `kopt bench` on one kernel; return (exit code, the --json document or None, stderr)."""
    command = [
        sys.executable,
        "-m",
        "kopt_core.cli",
        "bench",
        str(kernel),
        "--ref",
        str(ref),
        *(f"--{name}={value}" for name, value in dims.items()),
        "--json",
        "--budget-s",
        "1",
        "--timeout-s",
        str(timeout_s),
    ]
    env = dict(os.environ, KOPT_CACHE_DIR=str(cache))
    env.pop("TRITON_INTERPRET", None)
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


def workload(ref: Path, dims: dict) -> dict:
    spec = importlib.util.spec_from_file_location(f"ref_{ref.parent.name}", ref)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.workload_model(**dims)


def report(name: str, data: dict, ref: Path, dims: dict) -> None:
    """Print the median and the achieved rates (from the reference's workload_model) for pytest -s."""
    timing = data["kernel_timing"]
    seconds = timing["median_ms"] / 1e3
    model = workload(ref, dims)
    gbps = model["bytes_min"] / seconds / 1e9
    tflops = model["flops"] / seconds / 1e12
    print(
        f"\n[triton {name}] {dims}: median {timing['median_ms'] * 1e3:.1f} us ({timing['mode']}, "
        f"n={timing['n']}, ci +-{timing['median_ci_rel'] * 100:.2f}%), {gbps:.0f} GB/s, "
        f"{tflops:.2f} TFLOP/s, speedup vs reference {data.get('speedup_vs_reference') or 0:.2f}x"
    )


def assert_ok(code: int, data: dict | None, stderr: str) -> dict:
    assert data is not None, stderr[-3000:]
    assert code == EXIT_OK, (data.get("error"), stderr[-3000:])
    assert data["status"] == "ok" and data["correctness_pass"] and data["timing_valid"]
    return data


@pytest.mark.parametrize("name", list(CASES))
def test_examples_pass_and_are_timed(name, cache_dir):
    kernel, ref = EXAMPLES / name / "kernel.py", EXAMPLES / name / "ref.py"
    data = assert_ok(*run_bench(kernel, ref, CASES[name], cache_dir))
    report(name, data, ref, CASES[name])
    notes = data["backend_notes"]
    assert notes["interpreter"] is False
    assert notes["cubins"], f"no cubin in {notes['triton_cache_dir']}"
    if name == "matmul_autotune":
        pins = notes["autotune"]
        assert len(pins) == 1 and pins[0]["kernel"] == "matmul_kernel", pins
        assert set(pins[0]["config"] or ()) == {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"}, pins
        # every triton.Config the example declares was a candidate of the autotuner
        declared = kernel.read_text().count("triton.Config(")
        assert declared >= 2 and pins[0]["candidates"] == declared and "num_warps" in pins[0], pins
        pinned = Path(notes["pinned_source"])
        assert pinned.is_file() and pinned.name == "kernel.pinned.py"
        assert pinned.read_text().count("triton.Config") == 1
        print(f"[triton matmul_autotune] pinned {pins[0]} -> {pinned}")
    else:
        assert "autotune" not in notes


def test_matmul_cubins_are_recorded(cache_dir):
    kernel, ref = EXAMPLES / "matmul" / "kernel.py", EXAMPLES / "matmul" / "ref.py"
    data = assert_ok(*run_bench(kernel, ref, CASES["matmul"], cache_dir))
    cubins = data["backend_notes"]["cubins"]
    assert any(Path(c).name == "matmul_kernel.cubin" for c in cubins), cubins
    folder = Path(data["backend_notes"]["triton_cache_dir"])
    assert all((folder / c).is_file() for c in cubins)


def test_tiny_launches_are_timed_as_graph_replays(cache_dir):
    """A 64K-element add takes a few microseconds: it is timed as CUDA-graph replays of run_kernel."""
    kernel, ref = EXAMPLES / "vector_add" / "kernel.py", EXAMPLES / "vector_add" / "ref.py"
    dims = {"N": 65536}
    data = assert_ok(*run_bench(kernel, ref, dims, cache_dir))
    report("vector_add (tiny)", data, ref, dims)
    timing = data["kernel_timing"]
    assert timing["mode"] == "graph", (timing["mode"], timing["note"])


@pytest.mark.parametrize(
    ("wrong", "example"),
    [
        ("vector_add_wrong.py", "vector_add"),
        ("softmax_wrong.py", "softmax"),
        ("matmul_wrong.py", "matmul"),
    ],
)
def test_wrong_variants_fail(wrong, example, cache_dir):
    code, data, stderr = run_bench(WRONG / wrong, EXAMPLES / example / "ref.py", CASES[example], cache_dir)
    assert data is not None, stderr[-3000:]
    assert code == EXIT_KERNEL_FAILED, (code, data.get("error"))
    assert data["status"] == "failed" and not data["correctness_pass"]
    assert data["error_stage"] == "correctness", data.get("error")
    mismatches = sum(b["mismatches"] for b in data["correctness"][0]["buffers"])
    assert mismatches > 0
    print(f"\n[triton {wrong}] failed as it should: {data['error'][:200]}")

"""The Triton backend end to end on the CPU, through Triton's interpreter (``TRITON_INTERPRET=1``).

The whole path runs as on a GPU: preflight by AST, the content-keyed copy, a worker process that imports
the kernel file, calls setup() per seed, poisons the outputs, checks against the reference, times, and
re-checks; only the device is the CPU. The environment variable is set before the worker starts (the
worker inherits it), and it also makes the backend register itself as not needing a GPU.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

import kopt_core.bench
import kopt_triton.plugin
from kopt_core.errors import ConfigError
from kopt_core.plugins import get_plugin_manager
from kopt_core.records import BenchOptions
from kopt_core.steps.bench import bench_kernel, exit_code

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "triton"
WRONG = REPO / "tests" / "gpu_kernels" / "triton"
FAST = BenchOptions(seeds=(0, 1), warmup_ms=5, budget_s=0.2, min_samples=10, timeout_s=240)

VECTOR_ADD = (EXAMPLES / "vector_add" / "kernel.py", EXAMPLES / "vector_add" / "ref.py")
SOFTMAX = (EXAMPLES / "softmax" / "kernel.py", EXAMPLES / "softmax" / "ref.py")


@pytest.fixture
def pm(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("KOPT_CACHE_DIR", str(tmp_path / "builds"))
    return get_plugin_manager(autoload=False, plugins=(kopt_triton.plugin,))


def bench(pm, kernel, ref, **dims):
    return bench_kernel(pm, kernel, ref, dims, options=FAST)


@pytest.mark.parametrize(
    ("files", "dims"),
    [(VECTOR_ADD, {"N": 4096}), (SOFTMAX, {"M": 64, "N": 200})],
    ids=["vector_add", "softmax"],
)
def test_examples_pass_and_are_timed(pm, files, dims):
    result = bench(pm, *files, **dims)
    assert exit_code(result) == 0, result.error
    assert result.status == "ok" and result.correctness_pass and result.timing_valid
    checked = [(c.seed, c.output_init, c.passed) for c in result.correctness]
    assert checked == [
        (0, "poisoned", True),
        (1, "poisoned", True),
        (1, "decoy", True),
        (1_000_003, "poisoned", True),
    ]
    assert result.kernel_timing.clock == "host" and result.kernel_timing.median_ms > 0
    assert all(b.sized_by == "setup()" for b in result.buffers)
    assert result.build.backend == "triton" and result.build.launcher == "kopt_triton.launch:load"
    notes = result.backend_notes
    assert notes["interpreter"] is True and notes["cubins"] == [] and "autotune" not in notes
    assert notes["triton_cache_dir"] == str(Path(result.build.path).parent / "triton_cache")


@pytest.mark.parametrize(
    ("kernel", "ref", "dims", "buffer"),
    [
        (WRONG / "vector_add_wrong.py", VECTOR_ADD[1], {"N": 4096}, "z"),
        (WRONG / "softmax_wrong.py", SOFTMAX[1], {"M": 64, "N": 200}, "y"),
    ],
    ids=["vector_add_wrong", "softmax_wrong"],
)
def test_wrong_kernels_fail_with_mismatches(pm, kernel, ref, dims, buffer):
    result = bench(pm, kernel, ref, **dims)
    assert exit_code(result) == 2 and result.status == "failed" and not result.correctness_pass
    assert result.error_stage == "correctness" and result.kernel_timing is None
    check = result.correctness[0].buffers[0]
    assert check.buffer == buffer and check.mismatches > 0 and f"{buffer}: " in result.error


def test_a_file_without_run_kernel_is_refused_before_any_worker(pm, tmp_path, monkeypatch):
    def no_worker(request):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(kopt_core.bench, "run_worker", no_worker)
    kernel = tmp_path / "kernel.py"
    kernel.write_text("import triton\n\ndef setup(N, seed=None):\n    return {}\n")
    with pytest.raises(ConfigError, match="no top-level `def run_kernel") as caught:
        bench(pm, kernel, VECTOR_ADD[1], N=16)
    assert caught.value.exit_code == 4


def test_a_missing_dim_is_named(pm):
    with pytest.raises(ConfigError, match=r"missing dim N: setup\(\.\.\.\) in .*kernel\.py \(line \d+\)"):
        bench(pm, *SOFTMAX, M=64)


def test_setup_returning_the_wrong_shape_is_the_files_fault(pm, tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(
        "import triton\n\ndef setup(N, seed=None):\n    return {'x': 1}\n\ndef run_kernel(**kw):\n    pass\n"
    )
    result = bench(pm, kernel, VECTOR_ADD[1], N=16)
    assert exit_code(result) == 4 and result.error_stage == "reference"
    assert "setup() must return {'inputs'" in result.error


def test_a_kernel_that_raises_fails_as_a_kernel(pm, tmp_path):
    source = (
        VECTOR_ADD[0]
        .read_text()
        .replace("    grid = (triton.cdiv(N, BLOCK),)\n", "    raise ValueError('no launch today')\n")
    )
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    result = bench(pm, kernel, VECTOR_ADD[1], N=4096)
    assert exit_code(result) == 2 and result.error_stage == "before_timing"
    assert "LaunchError: run_kernel raised ValueError: no launch today" in result.error


# An autotuned kernel under the interpreter. Triton's default benchmarker needs a GPU driver, so this
# file brings its own do_bench: it reports each config as faster than the one before, making the last
# config the deterministic winner.
AUTOTUNED = """
import itertools
import os

import torch
import triton
import triton.language as tl

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
_times = itertools.count(100, -1)


def fake_bench(fn, quantiles=None, **kwargs):
    fn()
    t = float(next(_times))
    return [t, t, t] if quantiles else t


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 256}, num_warps=2, num_stages=2),
    ],
    key=["N"],
    do_bench=fake_bench,
)
@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    total = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    tl.store(z_ptr + offsets, total, mask=mask)


def setup(N, seed=None):
    gen = torch.Generator(device=DEVICE).manual_seed(seed or 0)
    x = torch.randn(N, generator=gen, device=DEVICE)
    y = torch.randn(N, generator=gen, device=DEVICE)
    return {"inputs": {"x": x, "y": y, "z": torch.empty_like(x), "N": N}, "outputs": ["z"]}


def run_kernel(x, y, z, N):
    add_kernel[lambda meta: (triton.cdiv(N, meta["BLOCK"]),)](x, y, z, N)
"""


def test_autotuned_kernel_is_pinned_after_one_pass(pm, tmp_path):
    kernel = tmp_path / "tuned.py"
    kernel.write_text(AUTOTUNED)
    warnings: list[str] = []
    result = bench_kernel(pm, kernel, VECTOR_ADD[1], {"N": 1000}, options=FAST, on_warning=warnings.append)
    assert exit_code(result) == 0, result.error
    assert any("pinned after one autotune pass" in w for w in warnings)
    notes = result.backend_notes
    assert notes["autotune"] == [
        {
            "kernel": "add_kernel",
            "config": {"BLOCK": 256},
            "num_warps": 2,
            "num_stages": 2,
            "num_ctas": 1,
            "index": 1,
            "candidates": 2,
        }
    ]
    pinned = Path(notes["pinned_source"])
    assert pinned.name == "tuned.pinned.py" and pinned.parent == Path(result.build.path).parent
    text = pinned.read_text()
    assert text.count("triton.Config(") == 1
    assert 'configs=[triton.Config({"BLOCK": 256}, num_warps=2, num_stages=2)],' in text
    assert text == AUTOTUNED.replace(
        """configs=[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 256}, num_warps=2, num_stages=2),
    ],""",
        'configs=[triton.Config({"BLOCK": 256}, num_warps=2, num_stages=2)],',
    )
    ast.parse(text)


def test_the_pinned_copy_runs_the_chosen_config_only(pm, tmp_path):
    """The pinned copy is itself a valid kernel file: benchmarking it needs no autotune pass."""
    kernel = tmp_path / "tuned.py"
    kernel.write_text(AUTOTUNED)
    first = bench(pm, kernel, VECTOR_ADD[1], N=1000)
    pinned = Path(first.backend_notes["pinned_source"])
    copy = tmp_path / "again.py"
    copy.write_text(textwrap.dedent(pinned.read_text()))
    second = bench(pm, copy, VECTOR_ADD[1], N=1000)
    assert exit_code(second) == 0, second.error
    assert second.backend_notes["autotune"][0]["config"] == {"BLOCK": 256}
    assert second.backend_notes["autotune"][0]["candidates"] == 1

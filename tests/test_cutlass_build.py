"""The bundled CUTLASS examples through the real cutlass backend (CPU only: nvcc, no GPU).

The CUTLASS 2.x example is built for sm_90a exactly as `kopt bench` builds it (kopt_cutlass's flags and
headers on top of kopt_cuda's), which is about 10 s and 0.6 GB of nvcc. The CUTLASS 3.x Hopper example
(and its wrong variant) are only preflighted here: building one takes about a minute and 3 GB, too heavy
for CI's 2 cores; tests/gpu/test_cutlass_gpu.py builds and runs them on the GPU machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import kopt_cuda.plugin
import kopt_cutlass.plugin
from kopt_core.backends import BackendRegistry
from kopt_core.bench.buffers import plan_buffers
from kopt_core.records import Candidate, Toolchain
from kopt_core.reference import load_reference
from kopt_core.steps.bench import check_candidate
from kopt_cutlass.headers import discover, find_cutlass

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SM80 = EXAMPLES / "cutlass" / "gemm_sm80_tensorop"
SM90 = EXAMPLES / "cutlass" / "gemm_sm90_tma_ws"
WRONG = REPO / "tests" / "gpu_kernels" / "cutlass"
DIMS = {"M": 256, "N": 384, "K": 512}  # distinct, so a buffer sized by the wrong dims shows

requires_headers = pytest.mark.skipif(
    find_cutlass() is None,
    reason="CUTLASS headers not found (pip install --no-deps nvidia-cutlass, or set CUTLASS_PATH): "
    + "; ".join(discover()[1]),
)


@pytest.fixture
def pm(make_pm):
    return make_pm(kopt_cuda.plugin, kopt_cutlass.plugin)


def test_cutlass_files_are_detected_as_cutlass_and_plain_cuda_as_cuda(pm):
    registry = BackendRegistry.from_plugins(pm)
    cutlass_files = (
        SM80 / "kernel.cu",
        SM90 / "kernel.cu",
        WRONG / "gemm_sm80_wrong.cu",
        WRONG / "gemm_sm90_wrong.cu",
    )
    for path in cutlass_files:
        assert registry.detect(path).name == "cutlass", path
    assert registry.detect(EXAMPLES / "cuda" / "sgemm_naive" / "kernel.cu").name == "cuda"


@pytest.mark.parametrize(
    ("kernel", "ref", "b_shape"),
    [
        (SM80 / "kernel.cu", SM80 / "ref.py", (DIMS["K"], DIMS["N"])),  # B row-major (K, N)
        (WRONG / "gemm_sm80_wrong.cu", SM80 / "ref.py", (DIMS["K"], DIMS["N"])),
        (SM90 / "kernel.cu", SM90 / "ref.py", (DIMS["N"], DIMS["K"])),  # B column-major: stored (N, K)
        (WRONG / "gemm_sm90_wrong.cu", SM90 / "ref.py", (DIMS["N"], DIMS["K"])),
    ],
    ids=["sm80", "sm80_wrong", "sm90", "sm90_wrong"],
)
def test_preflight_parses_solve_and_the_reference_fits(pm, kernel, ref, b_shape):
    """Signature parse and the core's contract checks (dims, reference, buffers): no nvcc, no headers."""
    reference = load_reference(ref)
    report = check_candidate(pm, Candidate(path=str(kernel), backend="cutlass"), DIMS, reference)
    interface = report.interface
    assert interface.entry == "solve"
    assert [(p.name, p.kind) for p in interface.params] == [
        ("A", "buffer"),
        ("B", "buffer"),
        ("C", "buffer"),
        ("M", "scalar"),
        ("N", "scalar"),
        ("K", "scalar"),
    ]
    buffers = {p.name: p for p in interface.buffers}
    assert {name: p.dtype for name, p in buffers.items()} == {"A": "float16", "B": "float16", "C": "float16"}
    assert buffers["A"].is_const and buffers["B"].is_const and not buffers["C"].is_const
    assert report.warnings == ()
    specs, _ = plan_buffers(interface, DIMS, reference)
    shapes = {spec.name: (spec.shape, spec.role) for spec in specs}
    assert shapes == {
        "A": ((DIMS["M"], DIMS["K"]), "input"),
        "B": (b_shape, "input"),
        "C": ((DIMS["M"], DIMS["N"]), "output"),
    }
    model = reference.workload_model(**DIMS)
    assert model["flops"] == 2 * DIMS["M"] * DIMS["N"] * DIMS["K"]


@pytest.mark.nvcc
@requires_headers
def test_cutlass_2x_example_builds_through_the_backend(tmp_path):
    candidate = Candidate(path=str(SM80 / "kernel.cu"), backend="cutlass")
    artifact = kopt_cutlass.plugin.kopt_compile(
        candidate=candidate,
        build_dir=tmp_path,
        toolchain=Toolchain(arch="sm_90a", cache_dir=str(tmp_path / "cache")),
    )
    assert artifact is not None and artifact.backend == "cutlass"
    assert Path(artifact.path).is_file() and artifact.path.endswith(".so")
    assert not artifact.cache_hit
    headers = find_cutlass()
    assert "--expt-relaxed-constexpr" in artifact.flags
    assert f"-I{headers.include_dir}" in artifact.flags
    assert "arch=compute_90a,code=sm_90a" in artifact.flags

    buffers = {p.name: p for p in artifact.interface.buffers}
    assert {name: p.dtype for name, p in buffers.items()} == {"A": "float16", "B": "float16", "C": "float16"}
    assert buffers["A"].is_const and buffers["B"].is_const and not buffers["C"].is_const
    assert [p.name for p in artifact.interface.scalars] == ["M", "N", "K"]

    # ptxas's report: the CUTLASS kernel (cutlass::Kernel<...Gemm...>) with its registers, no spills.
    kernels = [r for r in artifact.resources if r.registers is not None]
    assert kernels, artifact.log[-2000:]
    gemm = [r for r in kernels if r.name.startswith("_ZN7cutlass6Kernel")]
    assert gemm, [r.name for r in kernels]
    assert all(r.arch == "sm_90a" for r in gemm)
    assert all(r.registers > 0 and r.spill_store_bytes == 0 for r in gemm)
    assert (tmp_path / "build.log").is_file()

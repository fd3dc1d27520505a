"""The ``cutlass`` backend plugin (entry point ``cutlass`` in the group ``kopt``).

A CUTLASS kernel is a CUDA kernel file (``extern "C" void solve(...)``) that includes CUTLASS or CuTe:
it is parsed, built and benchmarked by the CUDA backend's functions (kopt_cuda.backend), with the CUTLASS
headers found by ``kopt_cutlass.headers`` and the flags CUTLASS needs. A ``// kopt:cutlass_gemm`` line
makes CUTLASS's configurations the kernel's search space (kopt_cutlass.search). Importing this module has
no side effects.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kopt_core import hookimpl
from kopt_core.errors import HardwareError
from kopt_core.records import Artifact, BackendInfo, Candidate, PreflightReport, ProbeResult, Toolchain
from kopt_cuda.backend import compile_solve, disassemble_library, preflight_solve
from kopt_cuda.build import NVCC_MISSING
from kopt_cuda.build import find_nvcc as cuda_find_nvcc
from kopt_cutlass.headers import compile_flags, discover
from kopt_cutlass.search import CutlassGemmSpace, cutlass_search_space

BACKEND = "cutlass"

INFO = BackendInfo(
    name=BACKEND,
    suffixes=(".cu", ".cuh"),
    summary=(
        'CUTLASS / CuTe kernels exposing extern "C" solve(...), built with nvcc against CUTLASS headers'
    ),
    needs_gpu=True,
    claims=("#include <cutlass/", '#include "cutlass/', "#include <cute/", '#include "cute/'),
    priority=10,
    compile_memory_gib=4.0,
    required_tools=("nvcc", "cuobjdump", "ncu"),
)

HEADERS_HINT = (
    "kopt-cutlass depends on the nvidia-cutlass wheel that carries them: reinstall it "
    "(`pip install nvidia-cutlass`), or set CUTLASS_PATH to a CUTLASS 3.x checkout (or CUTLASS_INCLUDE_DIR "
    "to its include directory)"
)


def find_nvcc() -> tuple[str | None, str]:
    """(path to nvcc or None, how it was looked up); never raises, as a probe must not."""
    try:
        return cuda_find_nvcc(), "kopt_cuda.build.find_nvcc"
    except Exception as exc:
        return None, f"kopt_cuda.build.find_nvcc failed: {type(exc).__name__}: {exc}"


@hookimpl
def kopt_register_backends(register: Callable[[BackendInfo], None]) -> None:
    register(INFO)


@hookimpl
def kopt_probe() -> ProbeResult:
    """Headers and nvcc. ``CUTLASS_PATH``/``CUTLASS_INCLUDE_DIR`` are read from the process environment."""
    headers, searched = discover()
    nvcc, nvcc_lookup = find_nvcc()
    details = {
        "include_dir": headers.include_dir if headers else None,
        "util_include_dir": headers.util_include_dir if headers else None,
        "source": headers.source if headers else None,
        "version": headers.version if headers else "",
        "searched": searched,
        "nvcc": nvcc,
        "nvcc_lookup": nvcc_lookup,
    }
    reasons = []
    if headers is None:
        reasons.append(
            "CUTLASS headers not found (need cutlass/cutlass.h and cute/tensor.hpp); searched: "
            + "; ".join(searched)
            + ". To fix: "
            + HEADERS_HINT
        )
    if nvcc is None:
        reasons.append(f"{NVCC_MISSING} ({nvcc_lookup})")
    return ProbeResult(backend=BACKEND, available=not reasons, reason=" | ".join(reasons), details=details)


@hookimpl
def kopt_preflight(candidate: Candidate) -> PreflightReport:
    return preflight_solve(candidate)


@hookimpl
def kopt_compile(candidate: Candidate, build_dir: Path, toolchain: Toolchain) -> Artifact:
    headers, searched = discover()
    if headers is None:
        raise HardwareError("CUTLASS headers not found; searched: " + "; ".join(searched), hint=HEADERS_HINT)
    return compile_solve(candidate, Path(build_dir), toolchain, extra_flags=compile_flags(headers))


@hookimpl
def kopt_disassemble(artifact: Artifact) -> str:
    """As for CUDA: the shared library's SASS, CUTLASS's kernels included. As for CUDA too, the profiled
    range holds solve's launches only, so the core's default kopt_profile fits."""
    return disassemble_library(artifact)


@hookimpl
def kopt_search_space(candidate: Candidate, text: str, dims: dict[str, Any]) -> CutlassGemmSpace | None:
    """CUTLASS's SM90 configurations that fit the problem, for a file with a ``// kopt:cutlass_gemm``
    line (kopt_cutlass.search), with their prior; None for the core to read ``// kopt:space`` lines."""
    return cutlass_search_space(text, candidate.path, dims)

"""The CUDA backend's hook implementations (entry point ``cuda`` in the group ``kopt``): thin, over
kopt_cuda.backend (the ``solve`` contract, the build, the SASS) and kopt_cuda.build (nvcc).

Bench, profile and SASS verification are the core's defaults (kopt_core/hookspecs.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kopt_core import hookimpl
from kopt_core.records import (
    Artifact,
    BackendInfo,
    Candidate,
    PreflightReport,
    ProbeResult,
    Toolchain,
)
from kopt_cuda.backend import compile_solve, disassemble_library, preflight_solve

NAME = "cuda"

INFO = BackendInfo(
    name=NAME,
    suffixes=(".cu",),
    summary='CUDA C++ kernels exposing extern "C" void solve(...), built with nvcc',
    needs_gpu=True,
    compile_memory_gib=2.0,
    required_tools=("nvcc", "cuobjdump", "ncu"),
)


@hookimpl
def kopt_register_backends(register: Callable[[BackendInfo], None]) -> None:
    register(INFO)


@hookimpl
def kopt_probe() -> ProbeResult:
    from kopt_cuda.build import NVCC_MISSING, find_nvcc, nvcc_version

    nvcc = find_nvcc()
    if nvcc is None:
        return ProbeResult(backend=NAME, available=False, reason=NVCC_MISSING)
    return ProbeResult(
        backend=NAME, available=True, details={"nvcc": nvcc, "nvcc_version": nvcc_version(nvcc)}
    )


@hookimpl
def kopt_preflight(candidate: Candidate) -> PreflightReport:
    return preflight_solve(candidate)


@hookimpl
def kopt_compile(candidate: Candidate, build_dir: Path, toolchain: Toolchain) -> Artifact:
    return compile_solve(candidate, build_dir, toolchain)


@hookimpl
def kopt_disassemble(artifact: Artifact) -> str:
    """The shared library's SASS, with the CUDA toolkit's cuobjdump. Only solve's launches fall inside
    the profiled range, so the core's default kopt_profile (every kernel in the range) fits."""
    return disassemble_library(artifact)

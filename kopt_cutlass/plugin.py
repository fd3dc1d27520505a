"""The ``cutlass`` backend plugin (entry point ``kopt_cutlass.plugin`` in the group ``kopt``).

In this version the backend registers its descriptor and says whether it can run here: it needs the
CUTLASS/CuTe headers (see ``kopt_cutlass.headers``) and nvcc. Building and benchmarking reuse the CUDA
backend and land with the CUTLASS backend issue. Importing this module has no side effects.
"""

from __future__ import annotations

import os
import shutil

from kopt_core import hookimpl
from kopt_core.records.backend import BackendInfo, ProbeResult
from kopt_cutlass.headers import discover

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
)

HEADERS_HINT = (
    "install them with `pip install nvidia-cutlass` (or pip install 'kopt-cutlass[headers]'), "
    "or set CUTLASS_PATH to a CUTLASS 3.x checkout (or CUTLASS_INCLUDE_DIR to its include directory)"
)
NVCC_HINT = "install the CUDA toolkit and put nvcc on PATH (or set CUDA_HOME)"


def _fallback_find_nvcc() -> str | None:
    """nvcc on PATH or under CUDA_HOME/CUDA_PATH//usr/local/cuda, for when kopt_cuda is not importable."""
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in roots:
        if root:
            candidate = os.path.join(root, "bin", "nvcc")
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def find_nvcc() -> tuple[str | None, str]:
    """(path to nvcc or None, how it was looked up). Uses ``kopt_cuda.build.find_nvcc`` when that
    module is importable, a plain PATH/CUDA_HOME lookup otherwise; never raises."""
    try:
        from kopt_cuda.build import find_nvcc as cuda_find_nvcc
    except ImportError:
        return _fallback_find_nvcc(), "PATH/CUDA_HOME lookup (kopt_cuda.build not importable)"
    try:
        return cuda_find_nvcc(), "kopt_cuda.build.find_nvcc"
    except Exception as exc:  # a probe must not raise
        return None, f"kopt_cuda.build.find_nvcc failed: {type(exc).__name__}: {exc}"


@hookimpl
def kopt_register_backends(register):
    register(INFO)


@hookimpl
def kopt_probe(backend, env):
    """Headers and nvcc. ``CUTLASS_PATH``/``CUTLASS_INCLUDE_DIR`` are read from the process
    environment; ``env`` (the caller's findings) is not needed here."""
    if backend != BACKEND:
        return None
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
        reasons.append(f"nvcc not found ({nvcc_lookup}); to fix: {NVCC_HINT}")
    return ProbeResult(backend=BACKEND, available=not reasons, reason=" | ".join(reasons), details=details)

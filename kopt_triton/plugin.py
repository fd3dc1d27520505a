"""The ``triton`` backend plugin (entry point ``kopt_triton.plugin`` in the group ``kopt``).

In this version the backend registers its descriptor and says whether Triton is installed. It never
imports Triton (slow, and it may pull in a GPU runtime): the probe uses ``importlib.util.find_spec`` and
the distribution's metadata. Importing this module has no side effects.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from kopt_core import hookimpl
from kopt_core.records.backend import BackendInfo, ProbeResult

BACKEND = "triton"

INFO = BackendInfo(
    name=BACKEND,
    suffixes=(".py",),
    summary="Triton kernels exposing setup(**dims, seed) and run_kernel(**inputs)",
    needs_gpu=True,
    claims=("import triton", "from triton"),
    priority=0,
    compile_memory_gib=2.0,
)

NOT_INSTALLED = "Triton is not installed (pip install 'kopt-triton[toolchain]' or pip install triton)"
BENCH_NOTE = "not yet implemented in this version"
# Distributions that install the ``triton`` package (upstream, PyTorch's builds, nightlies).
_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu", "triton-nightly")


def triton_version() -> str | None:
    """The installed Triton's version without importing it: None if the ``triton`` package cannot be
    found, "unknown" if it is there but no known distribution claims it."""
    try:
        if importlib.util.find_spec("triton") is None:
            return None
    except (ImportError, ValueError):
        return None
    for dist in _DISTRIBUTIONS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


@hookimpl
def kopt_register_backends(register):
    register(INFO)


@hookimpl
def kopt_probe(backend, env):
    """Whether Triton is installed; ``available`` reflects the toolchain only."""
    if backend != BACKEND:
        return None
    version = triton_version()
    details = {"triton": version, "bench": BENCH_NOTE}
    if version is None:
        return ProbeResult(backend=BACKEND, available=False, reason=NOT_INSTALLED, details=details)
    return ProbeResult(backend=BACKEND, available=True, reason="", details=details)

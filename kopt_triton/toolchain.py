"""Triton as the backend's toolchain, found without importing it: whether it is installed and which
version, and whether kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``).

Importing Triton is slow and may pull in a GPU runtime, so nothing here imports it: the version comes from
``importlib.util.find_spec`` and the distribution's metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

NOT_INSTALLED = "Triton is not installed, though kopt-triton depends on it: pip install triton"
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


def interpreter_mode() -> bool:
    """``TRITON_INTERPRET=1``: kernels run on the CPU in Triton's interpreter, no GPU needed."""
    return os.environ.get("TRITON_INTERPRET") == "1"

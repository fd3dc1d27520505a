"""Backends as the core sees them: a descriptor and the answer to 'can it run here?'."""

from __future__ import annotations

from typing import Any

from attrs import field, frozen

from kopt_core.records.fields import as_tuple


@frozen
class BackendInfo:
    """What a backend plugin registers through ``kopt_register_backends``."""

    name: str
    suffixes: tuple[str, ...] = field(converter=as_tuple)
    summary: str = ""
    needs_gpu: bool = True
    # Text markers that, found in a file with one of the suffixes, claim it for this backend ahead of a
    # backend that only matches by suffix (CUTLASS claims .cu files that include cutlass/ or cute/).
    claims: tuple[str, ...] = field(default=(), converter=as_tuple)
    priority: int = 0  # higher wins among backends that claim the same file
    compile_memory_gib: float = 2.0  # what one compile job may take, for the compile pool
    # NVIDIA tools the backend cannot work without; the hardware gate refuses when one is missing. A tool
    # its probe names in ``ProbeResult.details`` (the Triton wheel's cuobjdump) is the one it uses.
    required_tools: tuple[str, ...] = field(default=("ncu",), converter=as_tuple)
    # Other backends whose registry methods this one's kernels can take, beside those for its own name: a
    # PyTorch program that launches CUDA and Triton kernels takes CUDA's and Triton's methods.
    methods_of: tuple[str, ...] = field(default=(), converter=as_tuple)


@frozen
class ProbeResult:
    """Whether a backend's toolchain is usable on this machine, and why not."""

    backend: str
    available: bool
    reason: str = ""
    details: dict[str, Any] = field(factory=dict)

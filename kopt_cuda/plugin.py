"""The CUDA backend's hook implementations (entry point ``cuda`` in the group ``kopt``).

kopt_cutlass reuses ``preflight_solve``, ``compile_solve`` and ``disassemble_library`` with its own flags.
Bench, profile and SASS verification are the core's defaults (kopt_core/hookspecs.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kopt_core import hookimpl
from kopt_core.errors import ConfigError
from kopt_core.records import (
    Artifact,
    BackendInfo,
    Candidate,
    PreflightReport,
    ProbeResult,
    Toolchain,
)

NAME = "cuda"
SHIM = Path(__file__).parent / "shim" / "kopt_shim.cu"

INFO = BackendInfo(
    name=NAME,
    suffixes=(".cu",),
    summary='CUDA C++ kernels exposing extern "C" void solve(...), built with nvcc',
    needs_gpu=True,
    compile_memory_gib=2.0,
    required_tools=("nvcc", "cuobjdump", "ncu"),
)


def preflight_solve(candidate: Candidate) -> PreflightReport:
    from kopt_cuda.signature import parse_solve

    path = Path(candidate.path)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read kernel file {path}: {exc}") from None
    interface = parse_solve(source, str(path))
    outputs = [p for p in interface.buffers if not p.is_const]
    if not outputs:
        return PreflightReport(
            backend=candidate.backend,
            interface=interface,
            problems=(f"solve (line {interface.line}) has no non-const pointer: nothing to check",),
        )
    warnings: tuple[str, ...] = ()
    if len(outputs) == len(interface.buffers) > 1:
        # Every pointer is non-const: all are treated as outputs (poisoned), which is wrong for inputs.
        warnings = (
            f"{path.name}: no pointer of solve is const, so kopt treats "
            f"{', '.join(p.name for p in outputs)} all as outputs; make inputs const, or give roles in the "
            "reference's buffers()",
        )
    return PreflightReport(backend=candidate.backend, interface=interface, warnings=warnings)


def compile_solve(candidate: Candidate, build_dir: Path, toolchain: Toolchain, *, extra_flags=()) -> Artifact:
    from kopt_cuda.build import build_shared_library

    interface = preflight_solve(candidate).interface
    return build_shared_library(
        [Path(candidate.path), SHIM],
        toolchain=toolchain,
        build_dir=Path(build_dir),
        extra_flags=tuple(extra_flags),
        backend=candidate.backend,
        interface=interface,
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


def disassemble_library(artifact: Artifact) -> str:
    """``cuobjdump --dump-sass`` of a built shared library (CUDA and CUTLASS artifacts)."""
    from kopt_core.sass import disassemble_file

    return disassemble_file(artifact.path)

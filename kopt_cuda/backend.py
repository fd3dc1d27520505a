"""The CUDA backend's work, shared with kopt_cutlass: the ``solve`` contract of a ``.cu`` file, its build
into a shared library linked with kopt's shim, and that library's SASS. kopt_cuda.plugin's hooks and
kopt_cutlass.plugin's (with CUTLASS's flags) call these; a plugin module is never imported by another.

The parser, the build and the disassembler are imported when first called: every command that loads the
plugins imports this module, and most build nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kopt_core.errors import ConfigError
from kopt_core.records import Artifact, Candidate, PreflightReport, Toolchain

SHIM = Path(__file__).parent / "shim" / "kopt_shim.cu"


def preflight_solve(candidate: Candidate) -> PreflightReport:
    """The ``extern "C" void solve(...)`` a ``.cu`` file exposes, and what is wrong with it."""
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


def compile_solve(
    candidate: Candidate, build_dir: Path, toolchain: Toolchain, *, extra_flags: Sequence[str] = ()
) -> Artifact:
    """``candidate`` and kopt's shim built with nvcc into one cached shared library."""
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


def disassemble_library(artifact: Artifact) -> str:
    """``cuobjdump --dump-sass`` of a built shared library (CUDA and CUTLASS artifacts)."""
    from kopt_core.sass import disassemble_file

    return disassemble_file(artifact.path)

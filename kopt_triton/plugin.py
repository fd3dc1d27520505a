"""The ``triton`` backend plugin (entry point ``triton = kopt_triton.plugin`` in the group ``kopt``).

A Triton kernel file exposes ``setup(**dims, seed=None)`` and ``run_kernel(**inputs)``
(kopt_triton.contract). Preflight reads it by AST, compile freezes a content-keyed copy
(kopt_triton.build; Triton itself compiles at the first launch), and bench runs kopt's worker with
kopt_triton.launch's launcher, which also pins autotuned kernels and lists their cubins.

This module never imports Triton (slow, and it may pull in a GPU runtime): the probe asks
kopt_triton.toolchain, which uses ``importlib.util.find_spec`` and the distribution's metadata, and the
other hooks import their modules when called. Importing this module has no side effects.

Under ``TRITON_INTERPRET=1`` kernels run on the CPU through Triton's interpreter; the backend then
registers itself as not needing a GPU (read at registration, which happens per plugin-manager use), so
``kopt bench`` runs end to end on a machine without one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kopt_core import hookimpl
from kopt_core.records import Artifact, BackendInfo, Candidate, PreflightReport, ProbeResult, Toolchain
from kopt_triton.toolchain import NOT_INSTALLED, interpreter_mode, triton_version

if TYPE_CHECKING:
    from kopt_core.records.search import SearchSource

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


@hookimpl
def kopt_register_backends(register: Callable[[BackendInfo], None]) -> None:
    register(attrs.evolve(INFO, needs_gpu=False) if interpreter_mode() else INFO)


@hookimpl
def kopt_probe() -> ProbeResult:
    """Whether Triton is installed; ``available`` reflects the toolchain only. The wheel's cuobjdump is
    named in the details, for SASS where the CUDA toolkit has none."""
    from kopt_triton.sass import find_cuobjdump

    version = triton_version()
    details = {"triton": version, "cuobjdump": find_cuobjdump(), "interpreter": interpreter_mode()}
    if version is None:
        return ProbeResult(backend=BACKEND, available=False, reason=NOT_INSTALLED, details=details)
    return ProbeResult(backend=BACKEND, available=True, reason="", details=details)


@hookimpl
def kopt_preflight(candidate: Candidate, dims: dict[str, Any]) -> PreflightReport:
    """The setup/run_kernel contract by AST (no import, no GPU); autotuned kernels are a warning."""
    from kopt_triton.contract import find_autotuned, parse_kernel, read_tree

    interface = parse_kernel(candidate.path, dims)
    _, tree = read_tree(candidate.path)
    warnings = tuple(
        f"{Path(candidate.path).name}:{line}: {name} is under @triton.autotune: it is pinned after one "
        "autotune pass (the first launch chooses its configuration; every timed launch reuses it, and "
        "bench.json records it with a pinned copy of the source)"
        for name, line in find_autotuned(tree)
    )
    return PreflightReport(backend=BACKEND, interface=interface, warnings=warnings)


@hookimpl
def kopt_compile(candidate: Candidate, toolchain: Toolchain) -> Artifact:
    """A content-keyed copy of the kernel file (Triton compiles at the first launch, in the worker)."""
    from kopt_triton.build import prepare_artifact

    return prepare_artifact(candidate, toolchain)


@hookimpl
def kopt_disassemble(artifact: Artifact) -> str:
    """Every cubin Triton compiled for the artifact (its per-artifact cache), as one listing, with the
    cuobjdump the Triton wheel ships. The profiled range holds one run_kernel call (compilation and
    autotuning happen before it), so the core's default kopt_profile fits."""
    return disassemble_cubins(artifact)


@hookimpl
def kopt_search_space(candidate: Candidate, text: str) -> SearchSource | None:
    """The one autotune list of a file without ``kopt_space`` (kopt_triton.search); None for the core to
    read ``kopt_space``."""
    from kopt_triton.search import autotune_search_space

    return autotune_search_space(text, candidate.path)


def disassemble_cubins(artifact: Artifact) -> str:
    """Every cubin in the artifact's Triton cache, disassembled (``kopt_triton.sass.disassemble``)."""
    from kopt_core.sass import SassToolError
    from kopt_triton.launch import CACHE_FOLDER
    from kopt_triton.sass import disassemble

    cubins = sorted((Path(artifact.path).parent / CACHE_FOLDER).rglob("*.cubin"))
    if not cubins:
        raise SassToolError(
            f"no cubin for {artifact.source}: run it once (kopt bench) so that Triton compiles it"
        )
    return "\n".join(disassemble(cubin) for cubin in cubins)

"""The ``torch`` backend plugin (entry point ``torch = kopt_torch.plugin`` in the group ``kopt``).

A kernel is a Python module with ``class ModelNew`` (or ``def forward``) solving a KernelBench-format
problem that the reference names (kopt_torch.contract). Preflight reads it by AST; compile freezes a
content-keyed copy and builds its ``load_inline`` extensions in the build pool (kopt_torch.build); bench
is kopt's own worker with kopt_torch.launch's launcher; SASS is read from the built extensions and from the
cubins Triton compiled for the artifact. The eager baseline's kernels are PyTorch's own (inside
libtorch): they have no SASS kopt can read for it, which it says.

The plugin also registers ``kopt import kernelbench`` and ``kopt suite`` (kopt_torch.commands).
Importing this module imports neither torch nor Triton.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from kopt_core import hookimpl
from kopt_core.records import Artifact, BackendInfo, Candidate, PreflightReport, ProbeResult, Toolchain

BACKEND = "torch"

INFO = BackendInfo(
    name=BACKEND,
    suffixes=(".py",),
    summary="PyTorch modules with a ModelNew (load_inline CUDA, Triton or PyTorch) for KernelBench problems",
    needs_gpu=False,
    claims=("class ModelNew",),
    priority=10,  # a ModelNew that launches Triton kernels is this backend's, not Triton's
    compile_memory_gib=2.0,
    methods_of=("cuda", "triton"),  # its kernels are load_inline CUDA and Triton: their methods apply
)


@hookimpl
def kopt_register_backends(register: Callable[[BackendInfo], None]) -> None:
    register(INFO)


@hookimpl
def kopt_register_commands(register: Callable[[Any], None]) -> None:
    from kopt_torch.commands import import_group, suite_command

    register(import_group)
    register(suite_command)


@hookimpl
def kopt_probe() -> ProbeResult:
    found = importlib.util.find_spec("torch") is not None
    return ProbeResult(backend=BACKEND, available=found, reason="" if found else "PyTorch is not installed")


@hookimpl
def kopt_preflight(candidate: Candidate, dims: dict[str, Any], reference: Any) -> PreflightReport:
    """The entry point by AST, the reference's problem, and the dims against the problem's sizes."""
    from kopt_core.errors import ConfigError
    from kopt_core.records import Param
    from kopt_torch.contract import parse_kernel, problem_of
    from kopt_torch.problem import check_problem_source

    interface = parse_kernel(candidate.path)
    problem_path = problem_of(reference.path)
    _, sizes = check_problem_source(problem_path, problem_path.read_text())
    problems = tuple(
        f"dim {name}: the problem {problem_path.name} has no size {name}"
        for name in dims
        if name not in sizes
    )
    bad = tuple(
        f"dim {name}={value!r}: the problem's {name} is an int"
        for name, value in dims.items()
        if name in sizes and isinstance(sizes[name], int) and not isinstance(value, int)
    )
    if problems or bad:
        raise ConfigError(
            "the dims do not fit the problem:\n  - " + "\n  - ".join((*problems, *bad)),
            hint=f"its sizes: {', '.join(f'--{k}={v}' for k, v in sizes.items()) or 'none'}",
        )
    params = tuple(
        Param(
            name=name,
            kind="scalar",
            ctype=type(sizes[name]).__name__,
            dtype="int64" if isinstance(sizes[name], int) else "float64",
        )
        for name in dims
    )
    return PreflightReport(backend=BACKEND, interface=attrs.evolve(interface, params=params))


@hookimpl
def kopt_compile(candidate: Candidate, toolchain: Toolchain) -> Artifact:
    from kopt_torch.build import prepare_artifact

    return prepare_artifact(candidate, toolchain)


@hookimpl
def kopt_disassemble(artifact: Artifact) -> str:
    """The SASS of the artifact's own device code: its extensions' shared libraries and the cubins Triton
    compiled for it (after a run)."""
    from kopt_core.sass import NoOwnDeviceCode
    from kopt_core.sass.verify import disassemble_file
    from kopt_torch.build import TRITON_CACHE, extensions_dir
    from kopt_torch.sass import find_cuobjdump

    libraries = sorted(extensions_dir(artifact).rglob("*.so")) if artifact.cache_key else []
    cubins = sorted((Path(artifact.path).parent / TRITON_CACHE).rglob("*.cubin"))
    if not libraries and not cubins:
        raise NoOwnDeviceCode(
            f"{artifact.source} has no device code of its own to disassemble (no built extension, no Triton "
            "cubin): the kernels it runs are PyTorch's own, inside libtorch"
            + ("" if not _uses_triton(artifact) else "; run it once (kopt bench) so that Triton compiles it")
        )
    tool = find_cuobjdump()
    return "\n".join(disassemble_file(path, tool) for path in (*libraries, *cubins))


def _uses_triton(artifact: Artifact) -> bool:
    try:
        text = Path(artifact.path).read_text()
    except OSError:
        return False
    return "triton" in text

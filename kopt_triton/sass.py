"""SASS of Triton kernels without a GPU: ahead-of-time compilation to a cubin, and cuobjdump.

Triton's compiler needs no GPU once it is told the target (``GPUTarget("cuda", 90, 32)``), and the
Triton wheel ships the ``cuobjdump`` matching its ``ptxas``. So whether a kernel uses tensor-core
instructions (HGMMA on sm_90), vector loads or spills can be checked on any machine, in CI included.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
from pathlib import Path
from typing import Any

from kopt_core.sass import disassemble_file
from kopt_core.tools import find_tool


def find_cuobjdump() -> str | None:
    """The cuobjdump to use, without importing Triton: ``$TRITON_CUOBJDUMP_PATH`` (Triton's own knob),
    the one in the installed Triton wheel (``triton/backends/nvidia/bin``), then the CUDA toolkit's
    (kopt_core.tools). None if there is none."""
    candidates: list[Path] = []
    configured = os.environ.get("TRITON_CUOBJDUMP_PATH")
    if configured:
        candidates.append(Path(configured))
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidates.append(Path(location) / "backends" / "nvidia" / "bin" / "cuobjdump")
    toolkit = find_tool("cuobjdump")
    if toolkit:
        candidates.append(Path(toolkit))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _arch_number(arch: int | str) -> int:
    """90 from 90, "90", "sm_90" or "sm_90a" (Triton picks the "a" features itself for sm_90)."""
    if isinstance(arch, int):
        return arch
    match = re.fullmatch(r"(?:sm_)?(\d{2,3})[af]?", str(arch).strip())
    if match is None:
        raise ValueError(f"not a CUDA architecture: {arch!r} (expected 90, 'sm_90' or 'sm_90a')")
    return int(match.group(1))


def _jit_function(fn: Any) -> Any:
    """The JITFunction under @triton.autotune / @triton.heuristics wrappers."""
    from triton.runtime.jit import JITFunction

    obj = fn
    for _ in range(4):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
    raise TypeError(f"{fn!r} is not a @triton.jit function")


def compile_for(
    fn: Any,
    signature: dict,
    constexprs: dict,
    arch: int | str = 90,
    *,
    num_warps: int = 4,
    num_stages: int = 3,
    options: dict | None = None,
) -> bytes:
    """Compile the @triton.jit function ``fn`` for sm_``arch`` and return the cubin, with no GPU.

    ``signature`` maps each runtime argument to its Triton type ("*fp16", "i32", "fp32"...);
    ``constexprs`` maps each tl.constexpr argument to its value (entries marked "constexpr" in
    ``signature`` are added when missing, as Triton >= 3.2 wants every argument there).

    Triton's API for this moved: 3.3 and later (3.6 on the GPU machine, 3.9 here) take
    ``ASTSource(fn, signature, constexprs=...)``; 3.2 took ``constants=`` (also keyed by name). Which one
    is read off ``ASTSource.__init__``. The compile goes through Triton's cache (``TRITON_CACHE_DIR``).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    jit_fn = _jit_function(fn)
    unknown = [name for name in [*signature, *constexprs] if name not in jit_fn.arg_names]
    if unknown:
        raise ValueError(f"{jit_fn.__name__} has no argument(s) {unknown}; its arguments: {jit_fn.arg_names}")
    missing = [name for name in jit_fn.arg_names if name not in signature and name not in constexprs]
    if missing:
        raise ValueError(
            f"give a type (signature) or a value (constexprs) for {missing} of {jit_fn.__name__}"
        )
    full_signature = {name: signature.get(name, "constexpr") for name in jit_fn.arg_names}
    accepted = inspect.signature(ASTSource.__init__).parameters
    if "constexprs" in accepted:
        source = ASTSource(fn=jit_fn, signature=full_signature, constexprs=dict(constexprs))
    elif "constants" in accepted:
        source = ASTSource(fn=jit_fn, signature=full_signature, constants=dict(constexprs))
    else:
        raise RuntimeError(
            f"Triton {triton.__version__}: ASTSource takes neither constexprs= nor "
            "constants=; kopt supports Triton 3.2 and later"
        )
    target = GPUTarget("cuda", _arch_number(arch), 32)
    compiled = triton.compile(
        source, target=target, options={"num_warps": num_warps, "num_stages": num_stages, **(options or {})}
    )
    cubin = compiled.asm["cubin"]
    return bytes(cubin)


def disassemble(cubin_path: str | Path, cuobjdump: str | None = None) -> str:
    """``cuobjdump --dump-sass`` of a cubin, with the wheel's cuobjdump unless another is given (kopt's
    one disassembler, kopt_core.sass.disassemble_file). Its SassToolError is a HardwareError."""
    return disassemble_file(cubin_path, cuobjdump or find_cuobjdump())

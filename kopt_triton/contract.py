"""The static contract of a Triton kernel file, read from its syntax tree.

A Triton kernel file exposes ``setup(**dims, seed=None) -> {"inputs": {...}, "outputs": [...]}`` and
``run_kernel(**inputs)``. This module checks that without importing the file: importing would import
Triton (slow, and it may initialise a GPU runtime) and run the user's module-level code, and a preflight
must work on a machine without a GPU and explain a bad file by its line.

Dims are setup's parameters other than ``seed``: those without a default are required (``kopt bench``
refuses to start without them), those with a default are taken from the dims only when given.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from kopt_core.errors import ConfigError
from kopt_core.pysource import parse_module
from kopt_core.records import KernelInterface, Param

SETUP = "setup"
RUN_KERNEL = "run_kernel"
SEED = "seed"

CONTRACT_HINT = (
    "a Triton kernel file defines, at top level, setup(M, N, seed=None) returning "
    "{'inputs': {name: tensor or scalar}, 'outputs': [names of the tensors the kernel writes]}, and "
    "run_kernel(**inputs) that launches the kernel"
)


def read_tree(path: str | Path) -> tuple[str, ast.Module]:
    """The file's text and syntax tree; ConfigError (file, line, what is wrong) when it cannot be read
    or parsed."""
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read kernel file {path}: {exc}") from None
    try:
        tree = parse_module(source, str(path))
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else str(path)
        if path.suffix != ".py":  # e.g. --backend triton on a .cu file: not a Python typo to fix
            raise ConfigError(
                f"{path} is not a Triton module: the triton backend reads Python source, and "
                f"{f'line {exc.lineno}' if exc.lineno else 'the file'} is not Python ({exc.msg})",
                hint=f"{path.name} looks like a CUDA kernel: pass --backend cuda, or leave --backend out "
                "and kopt picks the backend from the file's suffix"
                if path.suffix in (".cu", ".cuh")
                else "leave --backend out and kopt picks the backend from the file's suffix",
            ) from None
        raise ConfigError(
            f"{where}: syntax error: {exc.msg}",
            hint="fix the Python syntax; kopt reads the file before running anything",
        ) from None
    return source, tree


def _top_level_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """The last top-level ``def name`` (a later definition replaces an earlier one, as at import)."""
    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node
    return found if isinstance(found, ast.FunctionDef) else None


def _scalar_type(arg: ast.arg, default: ast.expr | None) -> tuple[str, str]:
    """(ctype, dtype) of a dim: float when annotated ``float`` or defaulting to a float, else int."""
    annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
    is_float = annotation == "float" or (
        isinstance(default, ast.Constant) and isinstance(default.value, float)
    )
    return ("float", "float64") if is_float else ("int", "int64")


def parse_kernel(path: str | Path, dims: dict | None = None) -> KernelInterface:
    """The kernel file's interface: setup's dims as scalar parameters, buffers left to the worker.

    ``dims`` (when known, at preflight) decides which defaulted setup parameters are dims of this run:
    those given. Without ``dims`` only the required ones are listed. Raises ConfigError naming the file,
    the line and the fix.
    """
    path = Path(path)
    _, tree = read_tree(path)
    setup = _top_level_function(tree, SETUP)
    if setup is None:
        raise ConfigError(f"{path}: no top-level `def setup(...)`", hint=CONTRACT_HINT)
    run_kernel = _top_level_function(tree, RUN_KERNEL)
    if run_kernel is None:
        raise ConfigError(f"{path}: no top-level `def run_kernel(...)`", hint=CONTRACT_HINT)

    args = setup.args
    where = f"{path}:{setup.lineno}: setup"
    if args.posonlyargs:
        names = ", ".join(a.arg for a in args.posonlyargs)
        raise ConfigError(
            f"{where} has positional-only parameters ({names}); kopt calls "
            "setup(**dims, seed=SEED) with keywords",
            hint="remove the `/` from setup's parameters",
        )
    named = [*args.args, *args.kwonlyargs]
    if not any(a.arg == SEED for a in named) and args.kwarg is None:
        raise ConfigError(
            f"{where}({', '.join(a.arg for a in named)}) has no `seed` parameter; kopt calls "
            "setup(**dims, seed=SEED) once per correctness seed and expects fresh random inputs each time",
            hint="add `seed=None` to setup and draw the inputs from "
            "torch.Generator(device=DEVICE).manual_seed(seed)",
        )
    if run_kernel.args.posonlyargs:
        raise ConfigError(
            f"{path}:{run_kernel.lineno}: run_kernel has positional-only parameters; kopt "
            "calls run_kernel(**inputs) with keywords",
            hint="remove the `/` from run_kernel's parameters",
        )

    # Defaults align with the last parameters of each group.
    missing_defaults: list[ast.expr | None] = [None] * (len(args.args) - len(args.defaults))
    positional_defaults = missing_defaults + list(args.defaults)
    defaults = [
        *zip(args.args, positional_defaults, strict=True),
        *zip(args.kwonlyargs, args.kw_defaults, strict=True),
    ]
    params = []
    for arg, default in defaults:
        if arg.arg == SEED:
            continue
        if default is not None and (dims is None or arg.arg not in dims):
            continue  # an optional setting of setup, not given: setup uses its own default
        ctype, dtype = _scalar_type(arg, default)
        params.append(Param(name=arg.arg, kind="scalar", ctype=ctype, dtype=dtype))
    return KernelInterface(
        entry=SETUP, params=params, source=str(path), line=setup.lineno, dynamic_buffers=True
    )


def _is_autotune(decorator: ast.expr) -> bool:
    """``@triton.autotune(...)`` (any module alias) or ``@autotune(...)`` imported from Triton."""
    if not isinstance(decorator, ast.Call):
        return False
    func = decorator.func
    return (isinstance(func, ast.Attribute) and func.attr == "autotune") or (
        isinstance(func, ast.Name) and func.id == "autotune"
    )


def find_autotuned(tree: ast.Module) -> list[tuple[str, int]]:
    """(function name, decorator line) of every top-level function under ``@triton.autotune(...)``.

    Their configuration is chosen by timing at the first launch, so kopt pins it (records the choice and
    writes a pinned copy of the source) rather than let profiling see a different kernel.
    """
    return [(site.function, site.decorator.lineno) for site in autotune_sites(tree)]


@dataclass(frozen=True)
class AutotuneSite:
    """One ``@...autotune(...)`` decorator and where its ``configs`` argument is written."""

    function: str
    decorator: ast.Call
    configs: ast.expr | None  # the configs argument (keyword or first positional); None if absent


def autotune_sites(tree: ast.Module) -> list[AutotuneSite]:
    """Every top-level function's autotune decorator, in file order."""
    sites = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            if _is_autotune(decorator):
                assert isinstance(decorator, ast.Call)
                configs = next((k.value for k in decorator.keywords if k.arg == "configs"), None)
                if configs is None and decorator.args:
                    configs = decorator.args[0]
                sites.append(AutotuneSite(function=node.name, decorator=decorator, configs=configs))
                break
    return sites

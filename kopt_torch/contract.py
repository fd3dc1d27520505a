"""What a kernel file of the ``torch`` backend is, read by AST (nothing is imported).

A kernel is a Python module with a top-level ``class ModelNew`` (KernelBench's solutions; kopt's imported
baseline is ``class ModelNew(Model)``, the problem's own Model) or, for a problem without weights, a
top-level function ``forward(...)`` taking the problem's inputs. Its custom code may be ``load_inline``
CUDA, Triton, or plain PyTorch. The problem it solves is the reference's (``kopt_problem`` in the
reference file names it): the kernel file holds no inputs, no sizes and no weights of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kopt_core.errors import ConfigError
from kopt_core.pysource import parse_module
from kopt_core.records import KernelInterface

ENTRIES = ("ModelNew", "forward")
# What in a kernel's text means it builds a C++/CUDA extension at import (built in the build pool).
EXTENSION_MARKERS = ("load_inline", "cpp_extension.load", "cpp_extension import load")
PROBLEM_ATTRIBUTE = "kopt_problem"  # in the reference file: the problem file, relative to it


def read_tree(path: str | Path) -> tuple[str, ast.Module]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read kernel file {path}: {exc}") from None
    try:
        return text, parse_module(text, str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: {exc.msg}") from None


def parse_kernel(path: str | Path) -> KernelInterface:
    """The kernel's entry point (``ModelNew`` first, else ``forward``). Its buffers are the problem's
    inputs and outputs, known in the worker (``dynamic_buffers``)."""
    _, tree = read_tree(path)
    found = {
        node.name: node
        for node in tree.body
        if (isinstance(node, ast.ClassDef) and node.name == "ModelNew")
        or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "forward")
    }
    for entry in ENTRIES:
        if entry in found:
            return KernelInterface(
                entry=entry, params=(), source=str(path), line=found[entry].lineno, dynamic_buffers=True
            )
    raise ConfigError(
        f"{path}: no top-level `class ModelNew` (or `def forward(...)`)",
        hint="a torch kernel defines class ModelNew(nn.Module) with the problem's Model's constructor and "
        "forward; `kopt import kernelbench PROBLEM.py` writes one (the problem's eager Model) to start from",
    )


def builds_extension(text: str) -> bool:
    return any(marker in text for marker in EXTENSION_MARKERS)


def problem_of(reference_path: str | Path) -> Path:
    """The problem file a reference names with ``kopt_problem = "problem.py"`` (relative to it), read by
    AST. ConfigError when it names none."""
    reference_path = Path(reference_path)
    _, tree = read_tree(reference_path)
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == PROBLEM_ATTRIBUTE
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            problem = (reference_path.parent / node.value.value).resolve()
            if not problem.is_file():
                raise ConfigError(
                    f"{reference_path}: {PROBLEM_ATTRIBUTE} names {problem}, which is not a file"
                )
            return problem
    raise ConfigError(
        f"{reference_path}: a torch kernel needs a reference that names its problem "
        f'(`{PROBLEM_ATTRIBUTE} = "problem.py"`)',
        hint="write the reference with `kopt import kernelbench PROBLEM.py --out DIR`",
    )

"""An example third-party kopt backend: kernels written as plain PyTorch functions.

A kernel file is a ``.py`` module with ``def solve(...)``. Parameters annotated ``int`` or ``float`` are
dims; every other parameter is a tensor, described (dtype, shape, role) by the reference's
``buffers(**dims)``. The kernel runs on the GPU when PyTorch sees one and on the CPU otherwise, so this
backend also lets kopt's harness run end to end on a machine without a GPU.

It implements four hooks: register, probe, preflight and compile (nothing to build: the module is the
artifact). Benchmarking is the core's default: kopt's own worker, with this package's launcher.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable
from pathlib import Path

from kopt_core import hookimpl
from kopt_core.errors import ConfigError
from kopt_core.pysource import parse_module
from kopt_core.records import (
    Artifact,
    BackendInfo,
    Candidate,
    KernelInterface,
    Param,
    PreflightReport,
    ProbeResult,
)

NAME = "pytorch"
SCALAR_ANNOTATIONS = {"int": "int64", "float": "float64"}


def parse_interface(path: Path) -> KernelInterface:
    try:
        tree = parse_module(path.read_text(), str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: {exc.msg}") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "solve":
            params = []
            for arg in node.args.args:
                annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if annotation in SCALAR_ANNOTATIONS:
                    params.append(
                        Param(
                            name=arg.arg,
                            kind="scalar",
                            ctype=annotation,
                            dtype=SCALAR_ANNOTATIONS[annotation],
                        )
                    )
                else:
                    params.append(
                        Param(name=arg.arg, kind="buffer", ctype=annotation or "Tensor", dtype=None)
                    )
            return KernelInterface(entry="solve", params=params, source=str(path), line=node.lineno)
    raise ConfigError(
        f"{path}: no top-level `def solve(...)`", hint="define solve(x, y, N: int) over tensors"
    )


class TorchLauncher:
    def __init__(self, artifact: Artifact):
        import torch

        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        spec = importlib.util.spec_from_file_location("kopt_example_kernel", artifact.path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.solve = module.solve

    def bind(self, args: dict):
        solve = self.solve
        return lambda: solve(**args)

    def check(self) -> None:
        return None

    def capture(self, arg_sets):
        return None


def load(artifact: Artifact) -> TorchLauncher:
    return TorchLauncher(artifact)


@hookimpl
def kopt_register_backends(register: Callable[[BackendInfo], None]) -> None:
    register(
        BackendInfo(
            name=NAME,
            suffixes=(".py",),
            summary="plain PyTorch functions (example plugin)",
            needs_gpu=False,
            claims=("def solve(",),
            priority=-10,
            compile_memory_gib=0.5,
        )
    )


@hookimpl
def kopt_probe() -> ProbeResult:
    found = importlib.util.find_spec("torch") is not None
    return ProbeResult(backend=NAME, available=found, reason="" if found else "PyTorch is not installed")


@hookimpl
def kopt_preflight(candidate: Candidate) -> PreflightReport:
    return PreflightReport(backend=NAME, interface=parse_interface(Path(candidate.path)))


@hookimpl
def kopt_compile(candidate: Candidate) -> Artifact:
    """Nothing to build: the module is the artifact, loaded in the worker by ``load``."""
    return Artifact(
        backend=NAME,
        source=candidate.path,
        path=candidate.path,
        launcher="kopt_example_backend:load",
        interface=parse_interface(Path(candidate.path)),
        compiler="python",
    )

"""A KernelBench-format problem: a ``Model``, ``get_inputs()``, ``get_init_inputs()`` and module-level sizes.

kopt reads such a file as a problem, never as a kernel:

- its **sizes** are the module-level assignments of an int or float literal (``batch_size = 4096``): they
  are the problem's dims, each overridable (``--batch_size=1024``); ``get_inputs()`` and
  ``get_init_inputs()`` read them at call time, so a dim is applied by setting the module's global;
- its **inputs** are ``get_inputs()`` under a seed, made directly on the device (``torch.device`` as the
  default device), named by ``Model.forward``'s parameters;
- its **weights** are those of ``cls(*get_init_inputs())`` constructed under ``WEIGHT_SEED`` on the CPU and
  moved to the device: the reference's ``Model`` and every candidate's ``ModelNew`` are built the same way,
  so a ``ModelNew`` that creates its layers in the same order gets the same weights (KernelBench's rule);
- its **outputs** are what ``forward`` returns: one tensor (``out``) or a tuple (``out0``, ``out1``...),
  their shapes found by running the ``Model`` on the meta device (or, where an operator has no meta
  kernel, once on the device).

Each ``Problem`` imports the file under a name of its own, so the reference's copy of the problem and a
launcher's are separate modules.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import itertools
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from attrs import frozen

from kopt_core.errors import ConfigError
from kopt_core.pysource import parse_module

WEIGHT_SEED = 42  # the seed every Model and ModelNew is constructed under (KernelBench's)
INPUT_NAMES_FALLBACK = "in"  # forward(*args): in0, in1, ...
_module_ids = itertools.count()


@frozen
class OutputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name, "float32"


def read_sizes(tree: ast.Module) -> dict[str, int | float]:
    """The module-level ``NAME = <int or float literal>`` assignments, in order (a negative literal too)."""
    sizes: dict[str, int | float] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        else:
            continue
        if target.startswith("_"):
            continue
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue
        if isinstance(literal, bool) or not isinstance(literal, (int, float)):
            continue
        sizes[target] = literal
    return sizes


def check_problem_source(path: Path, text: str) -> tuple[ast.Module, dict[str, int | float]]:
    """Parse a problem file and check it has what KernelBench's format requires (ConfigError otherwise)."""
    try:
        tree = parse_module(text, str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: {exc.msg}") from None
    names = {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
    }
    missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if name not in names]
    if missing:
        raise ConfigError(
            f"{path}: not a KernelBench-format problem: no top-level {', '.join(missing)}",
            hint="a problem defines class Model(nn.Module), get_inputs() and get_init_inputs()",
        )
    return tree, read_sizes(tree)


def import_module(path: Path, prefix: str) -> ModuleType:
    """Import ``path`` under a name of its own, registered in ``sys.modules`` while it runs (Triton and
    dataclasses look modules up by name), with its folder importable."""
    import sys

    name = f"{prefix}_{next(_module_ids)}_{path.stem.replace('.', '_').replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def forward_names(cls: type, count: int | None = None) -> tuple[str, ...]:
    """The names of ``cls.forward``'s inputs (``in0``... for ``*args``, or when they cannot be read)."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params) or (count is not None and len(names) != count):
        return tuple(f"{INPUT_NAMES_FALLBACK}{i}" for i in range(count or len(names)))
    return tuple(names)


def output_names(count: int) -> tuple[str, ...]:
    return ("out",) if count == 1 else tuple(f"out{i}" for i in range(count))


def as_outputs(value: Any, where: str) -> tuple[Any, ...]:
    """forward's result as a tuple of tensors (one tensor, or a tuple/list of them)."""
    import torch

    values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not values or not all(isinstance(v, torch.Tensor) for v in values):
        raise TypeError(f"{where} must return a tensor or a tuple of tensors, not {type(value).__name__}")
    return values


@contextlib.contextmanager
def seeded(seed: int, device: str) -> Iterator[None]:
    """Run under ``torch.manual_seed(seed)`` without changing the caller's random state."""
    import torch

    devices = [torch.cuda.current_device()] if device == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class Problem:
    """A loaded problem file. ``dims`` given to any method override the file's sizes for that call."""

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read problem file {self.path}: {exc}") from None
        self.text = text
        _, self.sizes = check_problem_source(self.path, text)
        self.module = import_module(self.path, "kopt_torch_problem")
        self.Model: type = self.module.Model
        self._outputs: dict[tuple, tuple[OutputSpec, ...]] = {}
        self._names: dict[tuple, tuple[str, ...]] = {}

    # -- dims --------------------------------------------------------------------------------------
    def dims(self, given: dict[str, Any] | None = None) -> dict[str, int | float]:
        """The file's sizes with ``given`` applied (names that are not sizes are ignored)."""
        dims = dict(self.sizes)
        for name, value in (given or {}).items():
            if name in dims:
                dims[name] = value
        return dims

    def apply(self, given: dict[str, Any] | None) -> dict[str, int | float]:
        dims = self.dims(given)
        for name, value in dims.items():
            setattr(self.module, name, value)
        return dims

    # -- what the problem makes ----------------------------------------------------------------------
    def init_inputs(self, given: dict[str, Any] | None = None) -> list:
        self.apply(given)
        return list(self.module.get_init_inputs())

    def inputs(self, given: dict[str, Any] | None, seed: int, device: str) -> list:
        """``get_inputs()`` under ``seed``, its tensors made on ``device`` (moved there if made elsewhere)."""
        import torch

        self.apply(given)
        with seeded(seed, device), torch.device(device):
            made = list(self.module.get_inputs())
        return [v.to(device) if isinstance(v, torch.Tensor) and v.device.type != device else v for v in made]

    def input_names(self, given: dict[str, Any] | None = None) -> tuple[str, ...]:
        key = tuple(sorted(self.dims(given).items()))
        if key not in self._names:
            self._names[key] = forward_names(self.Model, len(self.meta_inputs(given)))
        return self._names[key]

    def meta_inputs(self, given: dict[str, Any] | None = None) -> list:
        import torch

        self.apply(given)
        with torch.device("meta"):
            return list(self.module.get_inputs())

    def build(self, cls: type, given: dict[str, Any] | None, device: str) -> Any:
        """``cls(*get_init_inputs())`` under ``WEIGHT_SEED``, on the CPU, then moved to ``device``."""
        init = self.init_inputs(given)
        with seeded(WEIGHT_SEED, "cpu"):
            model = cls(*init)
        return model.to(device) if hasattr(model, "to") else model

    def outputs(self, given: dict[str, Any] | None = None, device: str = "cpu") -> tuple[OutputSpec, ...]:
        """The outputs' names, shapes and dtypes at these dims (cached per dims)."""
        import torch

        dims = self.dims(given)
        key = tuple(sorted(dims.items()))
        if key not in self._outputs:
            try:
                with torch.device("meta"):
                    init = self.init_inputs(dims)
                    model = self.Model(*init)
                    values = as_outputs(model(*self.meta_inputs(dims)), f"{self.path.name}: Model.forward")
            except (NotImplementedError, RuntimeError):  # an operator without a meta kernel: run it once
                model = self.build(self.Model, dims, device)
                with torch.no_grad():
                    values = as_outputs(
                        model(*self.inputs(dims, 0, device)), f"{self.path.name}: Model.forward"
                    )
            names = output_names(len(values))
            self._outputs[key] = tuple(
                OutputSpec(name, tuple(int(s) for s in v.shape), str(v.dtype).removeprefix("torch."))
                for name, v in zip(names, values, strict=True)
            )
        return self._outputs[key]

    def workload(self, given: dict[str, Any] | None = None) -> dict[str, float]:
        """flops from PyTorch's FlopCounterMode (matmuls, convolutions, attention; elementwise work counts 0)
        on the meta device, and bytes_min: every input, output and weight read or written once."""
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        dims = self.dims(given)
        with torch.device("meta"):
            model = self.Model(*self.init_inputs(dims))
            inputs = self.meta_inputs(dims)
            counter = FlopCounterMode(display=False)
            with counter:
                values = as_outputs(model(*inputs), f"{self.path.name}: Model.forward")
        tensors: Sequence[Any] = [
            *(v for v in inputs if isinstance(v, torch.Tensor)),
            *values,
            *(model.parameters() if hasattr(model, "parameters") else ()),
            *(model.buffers() if hasattr(model, "buffers") else ()),
        ]
        return {
            "flops": float(counter.get_total_flops()),
            "bytes_min": float(sum(math.prod(t.shape) * t.element_size() for t in tensors)),
        }

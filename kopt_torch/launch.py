"""The torch launcher, made inside a bench worker by ``load(artifact, reference=...)``.

The reference names the problem (``kopt_problem``); the launcher loads its own copy of it and:

- makes each seed's arguments (``inputs``): the problem's ``get_inputs()`` under that seed, on the device,
  named by ``Model.forward``'s parameters, an empty tensor for each output, and the problem's dims;
- builds the kernel's ``ModelNew(*get_init_inputs())`` under the problem's weight seed (the reference's
  ``Model`` is built the same way), once per dims;
- launches one forward under ``torch.no_grad()`` (``bind``); the output buffers then take the storage of
  what forward returned (``Tensor.set_``: metadata, no copy), so a timed sample holds the forward alone,
  as PyTorch users call it, and every output the harness checks or audits is the one that launch returned.
  A result that is a view of an input is copied instead (poisoning the outputs must never write into an
  input).

Its extensions were built by compile (kopt_torch.build); ``TORCH_EXTENSIONS_DIR`` and
``TORCH_CUDA_ARCH_LIST`` are set as they were then, before the kernel's module is imported, and Triton's
cache is kept per artifact so its cubins can be disassembled.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Imported with this module, before the worker starts watching what kernel code changes: PyTorch's
# compiler stack, which the first operator on the meta device (the outputs' shapes) or a torch.compile
# imports, wraps torch.manual_seed as it loads; loaded here, that is PyTorch's doing, not the kernel's.
import torch._dynamo  # noqa: F401

from kopt_core.bench.launchers import LaunchError
from kopt_core.records import Artifact
from kopt_torch.build import TRITON_CACHE, build_environment
from kopt_torch.contract import problem_of
from kopt_torch.problem import Problem, as_outputs, import_module


def load(artifact: Artifact, reference: str = "") -> TorchLauncher:
    if not reference:
        raise LaunchError("the torch backend makes a kernel from its problem: the worker gave no reference")
    problem = Problem(problem_of(reference))
    os.environ.update(build_environment(artifact))
    cache = Path(artifact.path).parent / TRITON_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    origin = Path(artifact.source).resolve().parent if artifact.source else None
    import sys

    if origin is not None and str(origin) not in sys.path:
        sys.path.append(str(origin))
    module = import_module(Path(artifact.path), "kopt_torch_kernel")
    entry = artifact.interface.entry if artifact.interface is not None else "ModelNew"
    return TorchLauncher(problem, getattr(module, entry), entry)


class TorchLauncher:
    def __init__(self, problem: Problem, entry: Any, entry_name: str):
        import torch

        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.problem = problem
        self.entry, self.entry_name = entry, entry_name
        self._models: dict[tuple, Callable[..., Any]] = {}

    # -- arguments -----------------------------------------------------------------------------------
    def inputs(self, dims: dict[str, Any], seed: int) -> tuple[dict[str, Any], tuple[str, ...]]:
        import torch

        values = self.problem.inputs(dims, seed, self.device)
        args: dict[str, Any] = dict(zip(self.problem.input_names(dims), values, strict=False))
        outputs = self.problem.outputs(dims, self.device)
        for spec in outputs:
            args[spec.name] = torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device=self.device)
        for name, value in self.problem.dims(dims).items():
            args.setdefault(name, value)
        return args, tuple(spec.name for spec in outputs)

    # -- the kernel ------------------------------------------------------------------------------------
    def _model(self, dims: dict[str, Any]) -> Callable[..., Any]:
        key = tuple(sorted(dims.items()))
        if key not in self._models:
            if self.entry_name == "forward":
                self._models[key] = self.entry
            else:
                try:
                    self._models[key] = self.problem.build(self.entry, dims, self.device)
                except Exception as exc:
                    raise LaunchError(
                        f"ModelNew(*get_init_inputs()) raised {type(exc).__name__}: {exc}"
                    ) from None
        return self._models[key]

    def bind(self, args: dict[str, Any]) -> Callable[[], None]:
        import torch

        dims = {name: args[name] for name in self.problem.sizes if name in args}
        model = self._model(dims)
        names = self.problem.input_names(dims)
        inputs = [args[name] for name in names]
        outs = [args[spec.name] for spec in self.problem.outputs(dims, self.device)]
        held = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        adopt = self._adopt

        def launch() -> None:
            with torch.no_grad():
                adopt(model(*inputs), outs, held)

        return launch

    def _adopt(self, result: Any, outs: list, held: set[int]) -> None:
        """Make the output buffers hold what forward returned: each buffer takes the result's storage
        (``Tensor.set_``, no copy, so a timed launch is the forward alone), except a result that shares
        an input's storage (a view of it), which is copied. A result of another count, shape, dtype or
        device is the kernel's failure, named."""
        try:
            values = as_outputs(result, f"{self.entry_name}")
        except TypeError as exc:
            raise LaunchError(str(exc)) from None
        if len(values) != len(outs):
            raise LaunchError(
                f"{self.entry_name} returned {len(values)} tensors; the problem's Model returns {len(outs)}"
            )
        for index, (value, out) in enumerate(zip(values, outs, strict=True)):
            where = "its result" if len(outs) == 1 else f"its result {index}"
            if value.shape != out.shape:
                raise LaunchError(
                    f"{self.entry_name}: {where} has shape {tuple(value.shape)}; the problem's Model returns "
                    f"{tuple(out.shape)}"
                )
            if value.dtype != out.dtype:
                raise LaunchError(
                    f"{self.entry_name}: {where} is {str(value.dtype).removeprefix('torch.')}; the problem's "
                    f"Model returns {str(out.dtype).removeprefix('torch.')}"
                )
            if value.device != out.device:
                raise LaunchError(f"{self.entry_name}: {where} is on {value.device}, not on {out.device}")
            if value.untyped_storage().data_ptr() in held or value.requires_grad:
                out.copy_(value)
            else:
                out.set_(value)

    def check(self) -> None:
        """Nothing to do: a forward that failed raised in its launch."""
        return None

    def capture(self, arg_sets: list[dict[str, Any]]) -> None:
        """None: a forward is timed as PyTorch runs it, launch by launch from Python (a CUDA graph would
        hide the host's launch cost that eager PyTorch pays)."""
        return None

"""The reference of an imported problem: the problem's own ``Model``, built as every candidate is.

``kopt import kernelbench`` writes a ``ref.py`` that makes one ``ProblemReference`` and forwards
``reference(**args)`` and ``workload_model(**dims)`` to it. kopt's worker calls ``reference`` with its own
copies of the arguments the torch launcher made (inputs by name, empty outputs, the dims); the result is
``Model.forward``'s, under ``torch.no_grad()``, with TF32 off (the worker turns it off before any code
runs, for the reference and the candidates alike).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kopt_torch.problem import Problem, as_outputs


class ProblemReference:
    def __init__(self, problem_path: str | Path):
        self.problem = Problem(problem_path)
        self._models: dict[tuple, Any] = {}

    def reference(self, args: dict[str, Any]) -> Any:
        import torch

        dims = {name: args[name] for name in self.problem.sizes if name in args}
        tensors = [value for value in args.values() if isinstance(value, torch.Tensor)]
        device = tensors[0].device.type if tensors else "cpu"
        key = (device, tuple(sorted(dims.items())))
        if key not in self._models:
            self._models[key] = self.problem.build(self.problem.Model, dims, device)
        names = self.problem.input_names(dims)
        with torch.no_grad():
            values = as_outputs(self._models[key](*[args[name] for name in names]), "Model.forward")
        return values[0] if len(values) == 1 else values

    def workload(self, dims: dict[str, Any]) -> dict[str, float]:
        return self.problem.workload(dims)

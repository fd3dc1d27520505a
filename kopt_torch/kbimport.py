"""``kopt import kernelbench PROBLEM.py``: a KernelBench-format problem as a reference and a baseline.

It writes, in the output folder:

- ``problem.py``: the problem file, copied unchanged (the reference and the launcher load it);
- ``ref.py``: the reference (kopt_torch.reference): ``kopt_problem``, ``reference(**args)`` and a
  ``workload_model`` whose parameters are the problem's sizes, so a misspelt dim is refused;
- ``baseline.py``: the problem's text with ``class ModelNew(Model)``: PyTorch eager, the starting point
  that ``kopt bench``, ``profile`` and ``optimize`` take as it is;
- ``problem.json``: the sizes (the dims and their defaults), the inputs and outputs at those sizes.

The problem is imported and run on the meta device first (its outputs' shapes, its FLOPs): a file that is
not a problem, or whose Model cannot run, is refused before anything is written (exit 4), and the folder
is written through a staging folder, so it is never left half-written.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from attrs import frozen

from kopt_core.errors import ConfigError
from kopt_core.jsonio import write_json
from kopt_torch.problem import Problem

FILES = ("problem.py", "ref.py", "baseline.py", "problem.json")

_REF = '''"""kopt reference for the KernelBench-format problem {name}, written by `kopt import kernelbench`.

The problem is problem.py beside this file (from {source}). Its sizes are the dims, each overridable on
the command line: {dims}.
"""

from pathlib import Path

from kopt_torch.reference import ProblemReference

kopt_problem = "problem.py"
_problem = ProblemReference(Path(__file__).with_name(kopt_problem))
{tolerances}

def reference(**args):
    return _problem.reference(args)


def workload_model({signature}):
    return _problem.workload({{{mapping}}})
'''

_BASELINE = '''

class ModelNew(Model):
    """The baseline: PyTorch eager, the problem's own Model unchanged (written by kopt import kernelbench)."""
'''


@frozen
class Imported:
    folder: Path
    problem: Path
    reference: Path
    baseline: Path
    dims: dict[str, Any]
    inputs: tuple[dict[str, Any], ...]
    outputs: tuple[dict[str, Any], ...]
    workload: dict[str, float] | None


def describe(problem: Problem) -> tuple[tuple[dict, ...], tuple[dict, ...], dict[str, float] | None]:
    """The problem's inputs and outputs at its own sizes, and its workload (None where meta cannot run it)."""
    import torch

    try:
        inputs = problem.meta_inputs()
        names = problem.input_names()
        outputs = problem.outputs()
    except Exception as exc:
        raise ConfigError(
            f"{problem.path}: running Model.forward on get_inputs() failed: {type(exc).__name__}: {exc}"
        ) from None
    described_inputs = tuple(
        {"name": name, "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
        if isinstance(value, torch.Tensor)
        else {"name": name, "value": value}
        for name, value in zip(names, inputs, strict=False)
    )
    described_outputs = tuple({"name": o.name, "shape": list(o.shape), "dtype": o.dtype} for o in outputs)
    try:
        workload = problem.workload()
    except Exception:  # noqa: BLE001 - an operator without a meta kernel: the roofline goes without a model
        workload = None
    return described_inputs, described_outputs, workload


def import_problem(
    source: str | Path,
    out: str | Path,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    force: bool = False,
) -> Imported:
    source = Path(source).resolve()
    out = Path(out).resolve()
    if out.exists() and any(out.iterdir()) and not force:
        present = [name for name in FILES if (out / name).exists()]
        if present:
            raise ConfigError(
                f"{out} already holds an imported problem ({', '.join(present)})",
                hint="give another --out, or --force to replace it",
            )
    problem = Problem(source)
    inputs, outputs, workload = describe(problem)
    dims = dict(problem.sizes)
    tolerances = "".join(
        f"{name} = {value!r}\n" for name, value in (("atol", atol), ("rtol", rtol)) if value is not None
    )
    reference_text = _REF.format(
        name=source.stem,
        source=source.name,
        dims=", ".join(f"{k}={v}" for k, v in dims.items()) or "none",
        tolerances=("\n" + tolerances) if tolerances else "",
        signature=", ".join(f"{k}={v!r}" for k, v in dims.items()),
        mapping=", ".join(f"{k!r}: {k}" for k in dims),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (staging / "problem.py").write_text(problem.text)
        (staging / "ref.py").write_text(reference_text)
        (staging / "baseline.py").write_text(problem.text.rstrip("\n") + "\n" + _BASELINE)
        write_json(
            staging / "problem.json",
            {
                "source": str(source),
                "dims": dims,
                "inputs": list(inputs),
                "outputs": list(outputs),
                "workload": workload,
            },
        )
        if out.exists():
            for name in FILES:
                (out / name).unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            (staging / name).replace(out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Imported(
        folder=out,
        problem=out / "problem.py",
        reference=out / "ref.py",
        baseline=out / "baseline.py",
        dims=dims,
        inputs=inputs,
        outputs=outputs,
        workload=workload,
    )

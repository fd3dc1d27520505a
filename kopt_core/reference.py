"""The reference file a user brings: ``reference(**kwargs)``, optional ``atol``/``rtol``,
``workload_model(**dims)`` and kopt's ``buffers(**dims)`` extension (docs/contracts.md)."""

from __future__ import annotations

import importlib.util
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from attrs import define

from kopt_core.dims import accepted_dims
from kopt_core.errors import ConfigError
from kopt_core.records import Tolerance

# Tolerances when the reference file gives none: what that dtype's arithmetic can be expected to meet
# against a reference computed in the same dtype (docs/measurement.md, "Correctness").
DTYPE_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-9),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 2e-2),
    "float8_e4m3fn": (0.125, 0.125),
    "float8_e5m2": (0.25, 0.25),
}


@define
class ReferenceModule:
    path: Path
    module: ModuleType
    reference: Callable
    atol: float | None
    rtol: float | None
    workload_model: Callable | None
    buffers: Callable | None

    def workload(self, dims: dict) -> dict | None:
        """``workload_model(**dims)``, or None without one. A model that fails is the user's to fix."""
        if self.workload_model is None:
            return None
        try:
            model = self.workload_model(**dims)
        except Exception as exc:
            raise ConfigError(
                f"{self.path}: workload_model(**dims) raised {type(exc).__name__}: {exc}",
                hint="give every dim it takes on the command line",
            ) from None
        if not isinstance(model, dict) or not all(
            isinstance(value := model.get(k), (int, float)) and value >= 0 for k in ("flops", "bytes_min")
        ):
            raise ConfigError(
                f"{self.path}: workload_model(**dims) must return {{'flops': number >= 0, "
                f"'bytes_min': number >= 0}}, got {model!r}"
            )
        return model

    def describe_buffers(self, dims: dict) -> dict:
        """``buffers(**dims)`` (the dims it takes), or {} without one: {name: {shape, role, dtype, ...}}."""
        if self.buffers is None:
            return {}
        try:
            described = self.buffers(**accepted_dims(self.buffers, dims))
        except Exception as exc:
            raise ConfigError(
                f"{self.path}: buffers(**dims) raised {type(exc).__name__}: {exc}",
                hint="it receives the dims by name and returns "
                "{name: {'shape': (...), 'role': ..., 'dtype': ...}}",
            ) from None
        if not isinstance(described, dict):
            raise ConfigError(f"{self.path}: buffers(**dims) must return a dict of name -> description")
        return described

    def tolerance(self, dtype: str, atol: float | None = None, rtol: float | None = None) -> Tolerance:
        """Command line beats the reference file beats the dtype's default; integers compare exactly."""
        if atol is not None or rtol is not None:
            base = self.tolerance(dtype)
            return Tolerance(
                atol=base.atol if atol is None else atol,
                rtol=base.rtol if rtol is None else rtol,
                source="command line",
            )
        if self.atol is not None or self.rtol is not None:
            default = DTYPE_TOLERANCES.get(dtype, (0.0, 0.0))
            return Tolerance(
                atol=default[0] if self.atol is None else self.atol,
                rtol=default[1] if self.rtol is None else self.rtol,
                source=f"reference file {self.path.name}",
            )
        atol_d, rtol_d = DTYPE_TOLERANCES.get(dtype, (0.0, 0.0))
        return Tolerance(atol=atol_d, rtol=rtol_d, source=f"dtype default ({dtype})")


def _tolerance_value(path: Path, module: ModuleType, name: str) -> float | None:
    if not hasattr(module, name):
        return None
    value = getattr(module, name)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(
            f"{path}: {name} = {value!r} is not a non-negative number",
            hint=f"set {name} to a float such as 1e-4, or remove it to use the dtype's default",
        )
    return float(value)


def _optional_callable(path: Path, module: ModuleType, name: str, usage: str) -> Callable | None:
    if not hasattr(module, name):
        return None
    value = getattr(module, name)
    if not callable(value):
        raise ConfigError(f"{path}: {name} is not a function", hint=f"define it as {usage}, or remove it")
    return value


def load_reference(path: str | Path) -> ReferenceModule:
    """Import a reference file and check its contract. Errors name the file and what to change."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"reference file {path} does not exist", hint="pass the path of your ref.py with --ref"
        )
    if path.suffix != ".py":
        raise ConfigError(f"reference file {path} is not a Python file", hint="the reference is a .py module")
    name = f"kopt_reference_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"reference file {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))  # sibling imports, as when run as a script
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        where = next((f for f in reversed(frames) if Path(f.filename) == path.resolve()), None)
        at = f" (line {where.lineno})" if where else ""
        raise ConfigError(
            f"reference file {path} failed to import{at}: {type(exc).__name__}: {exc}",
            hint="fix the error so that `python -c 'import runpy; runpy.run_path(\"...\")'` succeeds",
        ) from None
    finally:
        sys.path.pop(0)
    fn = getattr(module, "reference", None)
    if fn is None or not callable(fn):
        raise ConfigError(
            f"reference file {path} has no function `reference`",
            hint="define reference(**kwargs) taking the kernel's arguments by name and writing the expected "
            "outputs in place",
        )
    return ReferenceModule(
        path=path,
        module=module,
        reference=fn,
        atol=_tolerance_value(path, module, "atol"),
        rtol=_tolerance_value(path, module, "rtol"),
        workload_model=_optional_callable(
            path, module, "workload_model", 'workload_model(**dims) -> {"flops": ..., "bytes_min": ...}'
        ),
        buffers=_optional_callable(
            path, module, "buffers", "buffers(**dims) -> {name: {shape, dtype, role}}"
        ),
    )

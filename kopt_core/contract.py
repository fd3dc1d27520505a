"""The static contract between a kernel's interface, the dims given, and the reference file."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable

from kopt_core.bench.buffers import plan_buffers
from kopt_core.errors import ConfigError
from kopt_core.records import KernelInterface
from kopt_core.reference import ReferenceModule

INTEGER_SCALARS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
# The largest value each integer scalar holds: the C type (and the ctypes type kopt passes it as) of the
# parameter a dim feeds. Dims are sizes, so the smallest is 0 for signed types too.
INTEGER_MAX = {
    dtype: (1 << int(dtype.removeprefix("u").removeprefix("int"))) // (1 if dtype.startswith("u") else 2) - 1
    for dtype in INTEGER_SCALARS
}
FLOAT_MAX = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


def _takes(function: Callable | None, name: str) -> bool:
    """Whether ``function`` accepts the keyword ``name`` (by name or through ``**kwargs``)."""
    if function is None:
        return False
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return True  # cannot tell: do not refuse
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _value_problem(param, value, where: str) -> str | None:
    """Why ``value`` cannot be passed as the scalar parameter ``param``, or None."""
    declared = f"`{param.ctype} {param.name}` of {where}"
    if param.dtype in INTEGER_SCALARS:
        high = INTEGER_MAX[param.dtype]
        if not isinstance(value, int):
            return f"dim {param.name}={value!r} must be an integer ({where} takes `{param.ctype}`)"
        if value < 0 and param.dtype.startswith("uint"):
            return f"dim {param.name}={value} is negative but `{param.ctype}` is unsigned"
        if value < 0:
            return (
                f"dim {param.name}={value} is negative; dims are sizes: give 0 <= {param.name} <= {high} "
                f"({declared})"
            )
        if value > high:
            return f"dim {param.name}={value} does not fit {declared}: give 0 <= {param.name} <= {high}"
    elif param.dtype == "bool" and value not in (0, 1):
        return f"dim {param.name}={value!r} must be 0 or 1 ({declared})"
    elif param.dtype in FLOAT_MAX and abs(value) > FLOAT_MAX[param.dtype]:
        largest = FLOAT_MAX[param.dtype]
        return f"dim {param.name}={value!r} does not fit {declared}: its largest magnitude is {largest:g}"
    return None


def check_dims(
    interface: KernelInterface, dims: dict, ref: ReferenceModule | None = None
) -> tuple[list[str], list[str]]:
    """(problems, warnings) about the dims against the entry point's scalar parameters. With ``ref``, a dim
    that neither the kernel nor the reference's workload_model / buffers() takes is a problem (a typo)."""
    problems, warnings = [], []
    where = f"{interface.entry}(...) in {interface.source}" + (
        f" (line {interface.line})" if interface.line else ""
    )
    for param in interface.scalars:
        if param.name not in dims:
            problems.append(
                f"missing dim {param.name}: {where} takes `{param.ctype} {param.name}`; "
                f"pass --{param.name}=VALUE"
            )
            continue
        problem = _value_problem(param, dims[param.name], where)
        if problem:
            problems.append(problem)
    names = {p.name for p in interface.params}
    scalars = [p.name for p in interface.scalars]
    for name in dims:
        if name in names:
            continue
        if ref is None or _takes(ref.workload_model, name) or _takes(ref.buffers, name):
            warnings.append(f"dim {name} is not a parameter of {where}; it is passed to workload_model only")
            continue
        missing = [n for n in scalars if n not in dims]
        close = difflib.get_close_matches(name, missing, n=1) or (missing if len(missing) == 1 else [])
        problems.append(
            f"unknown dim {name}: {where} takes "
            + (f"the dims {', '.join(scalars)} only" if len(scalars) > 1 else "")
            + (f"only the dim {scalars[0]}" if len(scalars) == 1 else "")
            + ("no dims" if not scalars else "")
            + f", and neither workload_model nor buffers() in {ref.path.name} takes {name}"
            + (f"; did you mean --{close[0]}?" if close else "; remove it")
        )
    return problems, warnings


def check_reference(interface: KernelInterface, ref: ReferenceModule, dims: dict) -> list[str]:
    problems = []
    names = [p.name for p in interface.params]
    try:
        # With dynamic buffers the arguments are known only once setup() ran: the worker checks them.
        if not interface.dynamic_buffers:
            inspect.signature(ref.reference).bind(**{name: None for name in names})
    except TypeError as exc:
        try:
            params = ", ".join(inspect.signature(ref.reference).parameters)
        except (TypeError, ValueError):
            params = "?"
        problems.append(
            f"{ref.path}: reference({params}) cannot take the kernel's arguments ({', '.join(names)}): "
            f"{exc}; name its parameters like the kernel's, or accept **kwargs"
        )
    try:
        ref.workload(dims)
    except ConfigError as exc:
        problems.append(exc.message)
    return problems


def check_contract(interface: KernelInterface, ref: ReferenceModule, dims: dict) -> list[str]:
    """Every static problem, or warnings only. Raises ConfigError listing all problems."""
    problems, warnings = check_dims(interface, dims, ref)
    if not problems:  # the reference's functions are called with the dims: only once they are complete
        problems += check_reference(interface, ref, dims)
    if not problems and not interface.dynamic_buffers:
        try:
            plan_buffers(interface, dims, ref)
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("the kernel's contract does not hold:\n  - " + "\n  - ".join(problems))
    return warnings

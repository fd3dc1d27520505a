"""The static contract between a kernel's interface, the dims given, and the reference file."""

from __future__ import annotations

import inspect

from kopt_core.bench.buffers import plan_buffers
from kopt_core.errors import ConfigError
from kopt_core.records import KernelInterface
from kopt_core.reference import ReferenceModule

INTEGER_SCALARS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def check_dims(interface: KernelInterface, dims: dict) -> tuple[list[str], list[str]]:
    """(problems, warnings) about the dims against the entry point's scalar parameters."""
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
        value = dims[param.name]
        if param.dtype in INTEGER_SCALARS and not isinstance(value, int):
            problems.append(f"dim {param.name}={value!r} must be an integer ({where} takes `{param.ctype}`)")
        elif param.dtype in INTEGER_SCALARS and param.dtype.startswith("uint") and value < 0:
            problems.append(f"dim {param.name}={value} is negative but `{param.ctype}` is unsigned")
    names = {p.name for p in interface.params}
    for name in dims:
        if name not in names:
            warnings.append(f"dim {name} is not a parameter of {where}; it is passed to workload_model only")
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
    problems, warnings = check_dims(interface, dims)
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

"""Which buffers a kernel runs on, how big, and what is in them.

Sizes come from the reference's ``buffers(**dims)`` description when it has one. Otherwise they follow
the default sizing rule, so that simple files run without one: every buffer gets the product
of the two largest integer dims (the one dim if there is only one, a fixed size if none), capped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kopt_core.errors import ConfigError
from kopt_core.records import BufferSpec, KernelInterface

if TYPE_CHECKING:  # torch is imported only where tensors are made (the worker)
    import torch

RULE_FIXED_ELEMENTS = 1 << 20
RULE_CAP_ELEMENTS = 1 << 28
ROLES = ("input", "output", "inout")
INITS = ("randn", "rand", "zeros", "ones", "arange")
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
# Every dtype a buffer may have: the element types a kernel signature maps to.
DTYPES = (*FLOAT_DTYPES, "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def _rule_shape(interface: KernelInterface, dims: dict) -> tuple[int, int, str]:
    """(requested elements, realised elements, rule description)."""
    scalar_names = {p.name for p in interface.scalars}
    values = sorted(
        (int(v) for k, v in dims.items() if k in scalar_names and isinstance(v, int) and v > 0), reverse=True
    )
    if len(values) >= 2:
        requested, rule = values[0] * values[1], "product of the two largest integer dims"
    elif len(values) == 1:
        requested, rule = values[0], "the one integer dim"
    else:
        requested, rule = RULE_FIXED_ELEMENTS, f"fixed size ({RULE_FIXED_ELEMENTS} elements; no integer dims)"
    realised = min(requested, RULE_CAP_ELEMENTS)
    if realised != requested:
        rule += f", capped at {RULE_CAP_ELEMENTS} elements"
    return requested, realised, rule


def default_init(dtype: str) -> str:
    if dtype in FLOAT_DTYPES:
        return "randn"
    if dtype == "bool":
        return "randint:0:2"
    if dtype.startswith("uint"):
        return "randint:0:16"
    return "randint:-8:8"


def plan_buffers(interface: KernelInterface, dims: dict, ref) -> tuple[tuple[BufferSpec, ...], dict]:
    """Buffer specs for the kernel's buffer parameters, and {name: requested shape} before any cap."""
    described = ref.describe_buffers(dims)
    names = {p.name for p in interface.buffers}
    for extra in set(described) - names:
        raise ConfigError(
            f"{ref.path}: buffers() describes {extra!r}, which is not a buffer parameter of "
            f"{interface.entry} in {interface.source} (buffers: {', '.join(sorted(names)) or 'none'})"
        )
    requested_elems, realised_elems, rule = _rule_shape(interface, dims)
    specs: list[BufferSpec] = []
    requested: dict[str, tuple[int, ...]] = {}
    for param in interface.buffers:
        desc = described.get(param.name)
        if desc is not None and not isinstance(desc, dict):
            raise ConfigError(
                f"{ref.path}: buffers()[{param.name!r}] must be a dict (shape, dtype, role, init)"
            )
        if desc is not None and "shape" in desc:
            raw = desc["shape"] if isinstance(desc["shape"], (list, tuple)) else (desc["shape"],)
            try:
                shape = tuple(int(s) for s in raw)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"{ref.path}: buffers()[{param.name!r}]['shape'] must be integers"
                ) from None
            if not shape or any(s <= 0 for s in shape):
                raise ConfigError(
                    f"{ref.path}: buffers()[{param.name!r}] has shape {shape}; extents must be > 0"
                )
            sized_by = "reference buffers()"
            requested[param.name] = shape
        else:  # no description, or one that gives only dtype / role / init: the rule sizes it
            shape = (realised_elems,)
            sized_by = rule
            requested[param.name] = (requested_elems,)
        desc = desc or {}
        dtype = desc.get("dtype", param.dtype)
        role = desc.get("role", "input" if param.is_const else "output")
        if dtype is None:
            raise ConfigError(
                f"{interface.source}: parameter {param.name!r} ({param.ctype}) has no element type kopt can "
                "allocate",
                hint="describe it in the reference: buffers(**dims) returning "
                + repr({param.name: {"dtype": "float32", "role": "input"}})
                + " (a 'shape' is optional)",
            )
        if dtype not in DTYPES:
            raise ConfigError(
                f"{ref.path}: buffers()[{param.name!r}] dtype {dtype!r} is not a dtype kopt knows; "
                f"give one of {', '.join(DTYPES)}"
            )
        if role not in ROLES:
            raise ConfigError(f"{ref.path}: buffers()[{param.name!r}] role {role!r} is not one of {ROLES}")
        if param.is_const and role != "input":
            raise ConfigError(
                f"{ref.path}: buffers() gives const parameter {param.name!r} role {role!r}; "
                "a const pointer is an input"
            )
        init = desc.get("init") or default_init(dtype)
        if init not in INITS and not (isinstance(init, str) and init.startswith("randint:")):
            raise ConfigError(
                f"{ref.path}: buffers()[{param.name!r}] init {init!r} is not one of {INITS} or "
                "'randint:LO:HI'"
            )
        specs.append(
            BufferSpec(name=param.name, dtype=dtype, shape=shape, role=role, init=init, sized_by=sized_by)
        )
    return tuple(specs), requested


def torch_dtype(name: str) -> torch.dtype:
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ConfigError(f"dtype {name!r} is not a torch dtype")
    return dtype


def spec_bytes(spec: BufferSpec) -> int:
    """The bytes a planned buffer takes: what a bench reports and a profile records for it."""
    return spec.numel * torch_dtype(spec.dtype).itemsize


def make_tensor(spec: BufferSpec, device: str, generator: torch.Generator) -> torch.Tensor:
    """A fresh tensor filled as ``spec.init`` says (random data, never zeros, unless asked)."""
    import torch

    dtype = torch_dtype(spec.dtype)
    init = spec.init
    if init in ("randn", "rand"):
        make = torch.randn if init == "randn" else torch.rand
        wide = torch.float32 if dtype.itemsize <= 4 else dtype
        return make(spec.shape, generator=generator, device=device, dtype=wide).to(dtype)
    if init == "zeros":
        return torch.zeros(spec.shape, device=device, dtype=dtype)
    if init == "ones":
        return torch.ones(spec.shape, device=device, dtype=dtype)
    if init == "arange":
        return torch.arange(spec.numel, device=device).reshape(spec.shape).to(dtype)
    _, lo, hi = init.split(":")
    values = torch.randint(
        int(lo), int(hi), spec.shape, generator=generator, device=device, dtype=torch.int64
    )
    return values.to(dtype)


def poison_(tensor: torch.Tensor) -> torch.Tensor:
    """Fill an output so that an element the kernel never writes cannot pass: NaN, or a sentinel."""
    import torch

    if tensor.dtype.is_floating_point:
        return tensor.fill_(float("nan"))
    if tensor.dtype == torch.bool:
        return tensor.fill_(True)
    info = torch.iinfo(tensor.dtype)
    return tensor.fill_(info.min if info.min < 0 else info.max)

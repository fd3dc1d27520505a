"""What kopt knows about a kernel's interface and the buffers it is run on."""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from kopt_core.records.fields import as_tuple

ParamKind = Literal["buffer", "scalar"]
Role = Literal["input", "output", "inout"]


@frozen
class Param:
    """One parameter of a kernel entry point (``solve`` for CUDA)."""

    name: str
    kind: ParamKind
    ctype: str  # the type as written in the source, normalised ("const float*", "int")
    dtype: str | None  # torch dtype name for buffers ("float32"), scalar type name for scalars ("int32")
    is_const: bool = False  # const pointer: the kernel promises not to write it (an input)


@frozen
class KernelInterface:
    """The entry point of one kernel file, as parsed by its backend."""

    entry: str
    params: tuple[Param, ...] = field(converter=as_tuple)
    source: str = ""  # file the entry point was found in
    line: int = 0  # 1-based line of the entry point
    # True when the kernel file makes its own arguments at run time (Triton's setup()): the params
    # are then only the dims that setup takes, and the buffers are learnt in the worker.
    dynamic_buffers: bool = False

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind == "buffer")

    @property
    def scalars(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind == "scalar")


@frozen
class BufferSpec:
    """A buffer as it will be allocated: dtype, shape, role, initialisation, and why that size."""

    name: str
    dtype: str
    shape: tuple[int, ...] = field(converter=as_tuple)
    role: Role
    init: str = "randn"  # randn | rand | zeros | ones | randint:LO:HI | arange
    sized_by: str = ""  # which rule gave the shape ("reference buffers()", "product of two largest dims")

    @property
    def numel(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count


@frozen
class Candidate:
    """A kernel file that kopt is asked to build, check and time."""

    path: str
    backend: str
    name: str = "kernel"  # "baseline", "b1", "no_memory.tma", ...

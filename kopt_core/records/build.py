"""What a backend's compile step produces."""

from __future__ import annotations

from attrs import field, frozen

from kopt_core.records.fields import as_tuple
from kopt_core.records.kernel import KernelInterface
from kopt_core.records.versions import BUILD_SCHEMA_VERSION


@frozen
class KernelResources:
    """ptxas's account of one compiled kernel (-Xptxas -v)."""

    name: str
    arch: str = ""
    registers: int | None = None
    shared_bytes: int | None = None
    stack_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    barriers: int | None = None
    constant_bytes: int | None = None


@frozen
class Artifact:
    """A built candidate, ready to be loaded by ``launcher`` inside a bench worker."""

    backend: str
    source: str  # the candidate's kernel file
    path: str  # the built thing (a shared library, a module, a cubin)
    launcher: str  # "module:function" that loads ``path`` into a callable inside the worker
    interface: KernelInterface | None = None
    arch: str = ""
    compiler: str = ""  # compiler and version ("nvcc 13.0.88")
    flags: tuple[str, ...] = field(default=(), converter=as_tuple)
    cache_key: str = ""
    cache_hit: bool = False
    build_seconds: float = 0.0
    log: str = ""  # compiler output (warnings, ptxas report)
    resources: tuple[KernelResources, ...] = field(default=(), converter=as_tuple)
    schema_version: int = BUILD_SCHEMA_VERSION  # persisted on its own as a build cache entry's build.json


@frozen
class Toolchain:
    """What a compile may use: the target architecture and the tools that were found."""

    arch: str  # "sm_90a"
    tools: dict[str, str] = field(factory=dict)  # tool name -> path ("nvcc": "/usr/local/cuda/bin/nvcc")
    cache_dir: str = ""  # where builds are cached by content ("" = the default)

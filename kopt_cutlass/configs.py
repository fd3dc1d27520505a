"""SM90 CUTLASS GEMM configurations: listed by ``cutlass_library``, written out as kopt CUTLASS kernels.

The nvidia-cutlass wheel carries ``cutlass_library``, the generator CUTLASS builds its kernel library
from. Without a GPU or a compiler it lists every SM90 GEMM that library would instantiate, each with its
tile shape, cluster shape, stages, kernel schedule, epilogue schedule, tile scheduler, element types,
layouts and alignment. ``enumerate_sm90_gemms`` keeps the ones that fit one problem kind (element types,
A/B layouts) and are dense single GEMMs of CUTLASS's 3.x API (``GemmKind.Universal3x``: not sparse,
grouped or pointer-array, blockwise-scaled, nor the 2.x API), as ``CutlassGemmConfig`` records.
``emit_kernel`` writes one as a kernel file kopt's CUTLASS backend builds (``templates/gemm_sm90.cu.in``):
CollectiveBuilder mainloop and epilogue, GemmUniversal, GemmUniversalAdapter, and
``extern "C" void solve(const A*, const B*, C*, int M, int N, int K)`` with the conventions of
examples/cutlass/gemm_sm90_tma_ws, whose ref.py checks the ``tn`` kernels.

A kernel differs from its listing in three ways, all outside the mainloop:

- C is row-major (kopt's references write an (M, N) tensor). The listing's C is always column-major;
  CUTLASS's epilogue builders take either layout, and the tile, cluster, stages and schedules are the
  listed ones.
- The epilogue has no source operand (``ElementC = void``): kopt's GEMM is C = A @ B. Listings that
  differ only in their source element are one config (named after the source-free listing when there is
  one); dropping the source only frees shared memory, so each still fits.
- C's alignment is 16 bytes whatever the listing says (``_OUTPUT_ALIGNMENT_BITS`` says why).

Listed GEMMs that cannot be written this way are excluded, with the reason (``GemmListing.excluded``):
the mixed-input GEMMs (A and B of different widths, ``EXCLUDED_MIXED_*``). Everything else of the kinds
above is written, the transposed epilogue of fp32 GEMMs with both operands row-major included (it undoes
the mainloop's swap of A and B whatever C's layout).

What the listing holds depends on CUTLASS's instantiation level. ``instantiation_level=None`` is the set
CUTLASS builds when a kernel list is given (each generator's own default: for 16-bit inputs, clusters of
two CTAs and tiles from 64x256 to 256x256, all K 64); an integer is CUTLASS's global level, whose digits
widen the pruning, cluster sizes, MMA multipliers and instruction shapes (231 adds 1x1x1 clusters to the
TMA kernels; 9992 is exhaustive and takes minutes). The raw listing is made once per level and process
(about 3 s for the default level, 4 to 8 s for 231, on a 2-core machine) and every query is cached.

``rank_for_problem`` orders configs best-first for one M x N x K problem from facts of CUTLASS's Hopper
kernels (``ProblemFit``, no measurement), and ``seed_order`` makes that order diverse: the prior whose
first configurations ``kopt search`` evaluates before its sampler proposes any.

Importing this module has no side effects; ``cutlass_library`` is imported on the first enumeration.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.resources
import itertools
import math
import os
import string
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

from attrs import field, frozen

from kopt_core.errors import ConfigError, HardwareError
from kopt_core.jsonio import write_text_atomic
from kopt_core.records.fields import as_tuple

ARCH = 90
LAYOUTS = ("nn", "nt", "tn", "tt")  # A then B; t = row-major, n = column-major (BLAS/CUTLASS letters)
# The toolkit the generator is told of. Its SM90 GEMMs ask for CUDA 12.3 at most, so any newer version
# lists the same set.
LISTING_CUDA_VERSION = "13.0"
TEMPLATE = "gemm_sm90.cu.in"

# Mixed-input GEMMs (A and B of different widths) are the listed kind this module does not write.
EXCLUDED_MIXED_SCALES = (
    "mixed-input GEMM with scales: its mainloop also reads per-group scales (and zero points) of the "
    "narrower operand, which solve(A, B, C, M, N, K) has no buffers for"
)
EXCLUDED_MIXED_SHUFFLED = (
    "mixed-input GEMM with a shuffled operand: it reads the narrower operand reordered in memory "
    "(compute_memory_reordering_atom), not in the layout kopt's buffers have"
)
EXCLUDED_MIXED_CONVERT = (
    "mixed-input GEMM (convert only): its mainloop converts the narrower operand in registers before the "
    "wgmma, a path kopt's template has never been built for; left out until a build covers it"
)

CUTLASS_HINT = "kopt-cutlass needs the nvidia-cutlass wheel, whose cutlass_library lists configurations"


@frozen
class _Element:
    """How one cutlass_library element type appears in a kernel."""

    cutlass: str  # the CUTLASS type the collectives are instantiated with
    pointer: str  # the element type of solve's pointer (one kopt_cuda.signature maps to a torch dtype)
    words: str  # for people


# cutlass_library's short names; only types solve can declare (kopt_cuda.signature.TORCH_DTYPE_OF).
ELEMENTS: dict[str, _Element] = {
    "f16": _Element("cutlass::half_t", "cutlass::half_t", "fp16"),
    "bf16": _Element("cutlass::bfloat16_t", "cutlass::bfloat16_t", "bf16"),
    "f32": _Element("float", "float", "fp32"),
    "tf32": _Element("cutlass::tfloat32_t", "float", "tf32 (fp32 storage)"),  # same 32 bits, read as tf32
    "e4m3": _Element("cutlass::float_e4m3_t", "cutlass::float_e4m3_t", "fp8 e4m3"),
    "e5m2": _Element("cutlass::float_e5m2_t", "cutlass::float_e5m2_t", "fp8 e5m2"),
    "s8": _Element("int8_t", "int8_t", "int8"),
    "u8": _Element("uint8_t", "uint8_t", "uint8"),
    "s32": _Element("int32_t", "int32_t", "int32"),
}


def _triple(values: Iterable[int]) -> tuple[int, int, int]:
    m, n, k = (int(value) for value in values)
    return (m, n, k)


@frozen
class CutlassGemmConfig:
    """One SM90 GEMM configuration, as ``emit_kernel`` writes it (see the module docstring for how it
    differs from its listing). Element names are cutlass_library's (``f16``, ``bf16``, ``e4m3``...);
    schedules are CUTLASS's C++ types."""

    procedural_name: str  # cutlass_library's name of the listed kernel
    tile_shape: tuple[int, int, int] = field(converter=_triple)  # CTA tile M, N, K
    cluster_shape: tuple[int, int, int] = field(converter=_triple)  # CTAs per cluster along M, N, K
    stages: int  # mainloop stages; 0 = as many as fit beside the epilogue (StageCountAutoCarveout)
    kernel_schedule: str  # "cutlass::gemm::KernelTmaWarpSpecializedCooperative"
    epilogue_schedule: str  # "cutlass::epilogue::TmaWarpSpecializedCooperative"
    tile_scheduler: str  # "" (the kernel's default) or "cutlass::gemm::StreamKScheduler"
    element_a: str
    element_b: str
    element_c: str  # the output (CUTLASS's D); there is no source operand
    element_accumulator: str
    element_epilogue: str  # alpha and beta, and the epilogue's arithmetic
    layout_a: str  # "t" row-major (K contiguous) or "n" column-major (M contiguous)
    layout_b: str  # "t" row-major (N contiguous) or "n" column-major (K contiguous)
    alignment_a: int  # elements; the contiguous extent of each operand must be a multiple
    alignment_b: int
    alignment_c: int
    listing: str = ""  # where the listing came from: "nvidia-cutlass 4.2.0.0, instantiation level default"
    arch: int = ARCH

    @property
    def layouts(self) -> str:
        """A's letter then B's, as in CUTLASS's names: "tn" is A row-major, B column-major."""
        return self.layout_a + self.layout_b

    @property
    def id(self) -> str:
        """A short id that stays the same for the same kernel: a hash of everything ``emit_kernel``
        writes (not of the listing's name or provenance)."""
        identity = "|".join(
            str(part)
            for part in (
                self.arch,
                self.element_a,
                self.element_b,
                self.element_c,
                self.element_accumulator,
                self.element_epilogue,
                self.layouts,
                self.alignment_a,
                self.alignment_b,
                self.alignment_c,
                self.tile_shape,
                self.cluster_shape,
                self.stages,
                self.kernel_schedule,
                self.epilogue_schedule,
                self.tile_scheduler,
            )
        )
        return f"sm{self.arch}_{hashlib.sha256(identity.encode()).hexdigest()[:10]}"

    @property
    def label(self) -> str:
        """One line for people: ``tn 128x128x64 cluster 2x1x1 KernelTmaWarpSpecializedCooperative +
        TmaWarpSpecializedCooperative, StreamKScheduler, stages auto, align 8`` (alignments of A, B and C
        as ``2/2/8`` when they differ)."""
        scheduler = f", {_last(self.tile_scheduler)}" if self.tile_scheduler else ""
        stages = str(self.stages) if self.stages else "auto"
        alignments = (self.alignment_a, self.alignment_b, self.alignment_c)
        alignment = (
            "/".join(str(value) for value in alignments) if len(set(alignments)) > 1 else str(alignments[0])
        )
        return (
            f"{self.layouts} {_shape(self.tile_shape)} cluster {_shape(self.cluster_shape)} "
            f"{_last(self.kernel_schedule)} + {_last(self.epilogue_schedule)}{scheduler}, "
            f"stages {stages}, align {alignment}"
        )


@frozen
class ExcludedGemm:
    """A listed GEMM of the requested kind that ``emit_kernel`` cannot write faithfully."""

    procedural_name: str
    reason: str


@frozen
class GemmListing:
    """One query's answer: the configurations, and the listed GEMMs left out with why."""

    configs: tuple[CutlassGemmConfig, ...] = field(converter=as_tuple)
    excluded: tuple[ExcludedGemm, ...] = field(converter=as_tuple)
    listed: int  # listed GEMMs of the kind asked for, before merging source variants and excluding


# --- the raw listing ---------------------------------------------------------------------------------


@frozen
class _Listed:
    """One dense SM90 3.x GEMM of cutlass_library's listing, as plain values."""

    procedural_name: str
    mixed_input_mode: str  # "" (same widths), "ConvertOnly", "ScaleOnly" or "ScaleWithZeroPoint"
    mixed_input_shuffle: bool
    element_source: str  # "void" when the listing reads no C
    config: CutlassGemmConfig


def _cutlass_library() -> Any:
    try:
        from cutlass_library import generator, library, manifest
    except ImportError as exc:
        raise HardwareError(f"cannot import cutlass_library: {exc}", hint=CUTLASS_HINT) from None
    return generator, library, manifest


def _wheel_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def _listed(instantiation_level: int | None, cuda_version: str) -> tuple[_Listed, ...]:
    """Every dense single-GEMM SM90 operation of CUTLASS's 3.x API that cutlass_library lists, in its
    order. GenerateSM90 also lists the other kinds (sparse, grouped, blockwise, 2.x, rank-k...); they are
    dropped here."""
    generator, library, manifest = _cutlass_library()
    options = [
        "--kernels=all",
        "--architectures=90a",
        f"--cuda-version={cuda_version}",
        "--operations=gemm",
        f"--instantiation-level={instantiation_level or ''}",
    ]
    listing = manifest.Manifest(generator.define_parser().parse_args(options))
    generator.GenerateSM90(listing, cuda_version)
    level = "default" if instantiation_level is None else str(instantiation_level)
    provenance = f"nvidia-cutlass {_wheel_version()}, instantiation level {level}"
    found = []
    for operation in listing.operations_by_name.values():
        if operation.arch != ARCH or getattr(operation, "gemm_kind", None) != library.GemmKind.Universal3x:
            continue
        found.append(_from_operation(operation, library, provenance))
    return tuple(found)


# C's alignment is not the listing's. The generator derives it from the source's element (a source-free
# listing inherits whatever the previous listing had: 1 for some fp8 outputs), and CUTLASS's own emitter
# replaces it with 16 bytes for TMA epilogues, which need that. Every config here asks 16 bytes of C's
# rows: what TMA needs, more than the other epilogues (element by element stores) need, and the same for
# listings that differ only in their source.
_OUTPUT_ALIGNMENT_BITS = 128


def _from_operation(operation: Any, library: Any, provenance: str) -> _Listed:
    tile = operation.tile_description
    name = library.DataTypeNames
    scheduler = library.TileSchedulerTag[operation.tile_scheduler]
    config = CutlassGemmConfig(
        procedural_name=operation.procedural_name(),
        tile_shape=tile.threadblock_shape,
        cluster_shape=tile.cluster_shape,
        stages=tile.stages,
        kernel_schedule=library.KernelScheduleTag[operation.kernel_schedule],
        epilogue_schedule=library.EpilogueScheduleTag[operation.epilogue_schedule],
        tile_scheduler="" if scheduler == "void" else scheduler,
        element_a=name[operation.A.element],
        element_b=name[operation.B.element],
        element_c=name[operation.D.element],
        element_accumulator=name[tile.math_instruction.element_accumulator],
        element_epilogue=name[operation.element_epilogue],
        layout_a=library.ShortLayoutTypeNames[operation.A.layout],
        layout_b=library.ShortLayoutTypeNames[operation.B.layout],
        alignment_a=operation.A.alignment,
        alignment_b=operation.B.alignment,
        alignment_c=_OUTPUT_ALIGNMENT_BITS // library.DataTypeSize[operation.D.element],
        listing=provenance,
    )
    return _Listed(
        procedural_name=config.procedural_name,
        mixed_input_mode=operation.mixed_input_mode.name if operation.mixed_input_mode is not None else "",
        mixed_input_shuffle=bool(operation.mixed_input_shuffle),
        element_source=name[operation.C.element],
        config=config,
    )


# --- queries ------------------------------------------------------------------------------------------


def _element(role: str, value: str) -> str:
    if value not in ELEMENTS:
        raise ConfigError(
            f"{role}={value!r} is not an element type kopt can write a CUTLASS GEMM for; use one of "
            + ", ".join(ELEMENTS)
            + " (cutlass_library's names)"
        )
    return value


def _layouts(layouts: str | Iterable[str] | None) -> tuple[str, ...]:
    if layouts is None:
        return LAYOUTS
    wanted = (layouts,) if isinstance(layouts, str) else tuple(layouts)
    unknown = [layout for layout in wanted if layout not in LAYOUTS]
    if unknown or not wanted:
        raise ConfigError(
            f"layouts {unknown or wanted!r}: give A's and B's letters, t for row-major and n for "
            f"column-major, from {', '.join(LAYOUTS)} (tn: A is M x K row-major, B is K x N column-major)"
        )
    return tuple(sorted(set(wanted)))


def _level(instantiation_level: int | None) -> int | None:
    if instantiation_level is None:
        return None
    if isinstance(instantiation_level, int) and not isinstance(instantiation_level, bool):
        if instantiation_level > 0:
            return instantiation_level
    raise ConfigError(
        f"instantiation_level={instantiation_level!r}: give None (CUTLASS's default listing) or a "
        "positive integer (CUTLASS's global level, e.g. 231)"
    )


def list_sm90_gemms(
    a: str = "f16",
    b: str = "f16",
    c: str = "f16",
    accumulator: str = "f32",
    layouts: str | Iterable[str] | None = None,
    *,
    instantiation_level: int | None = None,
    cuda_version: str = LISTING_CUDA_VERSION,
) -> GemmListing:
    """The SM90 GEMMs cutlass_library lists for A and B of elements ``a`` and ``b``, output C of ``c``,
    accumulating in ``accumulator``, with A/B layouts among ``layouts`` (None: all four), as configs
    ``emit_kernel`` can write, and those it cannot with why. Deterministic, and cached per arguments."""
    query = (
        _element("a", a),
        _element("b", b),
        _element("c", c),
        _element("accumulator", accumulator),
        _layouts(layouts),
        _level(instantiation_level),
        cuda_version,
    )
    return _query(*query)


@functools.cache
def _query(
    a: str,
    b: str,
    c: str,
    accumulator: str,
    layouts: tuple[str, ...],
    instantiation_level: int | None,
    cuda_version: str,
) -> GemmListing:
    matching = [
        listed
        for listed in _listed(instantiation_level, cuda_version)
        if (listed.config.element_a, listed.config.element_b, listed.config.element_c) == (a, b, c)
        and listed.config.element_accumulator == accumulator
        and listed.config.layouts in layouts
    ]
    excluded = []
    variants: dict[str, list[_Listed]] = {}  # config id -> its listings (with and without a source)
    for listed in matching:
        reason = _exclusion(listed)
        if reason:
            excluded.append(ExcludedGemm(listed.procedural_name, reason))
        else:
            variants.setdefault(listed.config.id, []).append(listed)
    configs = sorted((_representative(group) for group in variants.values()), key=_order)
    return GemmListing(
        configs=configs,
        excluded=sorted(excluded, key=lambda item: item.procedural_name),
        listed=len(matching),
    )


def _exclusion(listed: _Listed) -> str:
    if not listed.mixed_input_mode:
        return ""
    if listed.mixed_input_shuffle:
        return EXCLUDED_MIXED_SHUFFLED
    if listed.mixed_input_mode != "ConvertOnly":
        return EXCLUDED_MIXED_SCALES
    return EXCLUDED_MIXED_CONVERT


def _representative(group: list[_Listed]) -> CutlassGemmConfig:
    """The source-free listing when there is one (it is the kernel written), else the first by name."""
    return min(group, key=lambda listed: (listed.element_source != "void", listed.procedural_name)).config


def _order(config: CutlassGemmConfig) -> tuple:
    return (
        config.layouts,
        config.tile_shape,
        config.cluster_shape,
        config.kernel_schedule,
        config.epilogue_schedule,
        config.tile_scheduler,
        config.alignment_a,
        config.alignment_b,
        config.alignment_c,
        config.stages,
    )


def enumerate_sm90_gemms(
    a: str = "f16",
    b: str = "f16",
    c: str = "f16",
    accumulator: str = "f32",
    layouts: str | Iterable[str] | None = None,
    *,
    instantiation_level: int | None = None,
    cuda_version: str = LISTING_CUDA_VERSION,
) -> tuple[CutlassGemmConfig, ...]:
    """The configurations of ``list_sm90_gemms`` (same arguments), in a fixed order: by layouts, tile,
    cluster, schedules, tile scheduler, alignment."""
    return list_sm90_gemms(
        a, b, c, accumulator, layouts, instantiation_level=instantiation_level, cuda_version=cuda_version
    ).configs


# --- problems -----------------------------------------------------------------------------------------


def alignment_requirements(config: CutlassGemmConfig) -> tuple[tuple[str, int], ...]:
    """(dim, multiple) pairs a problem must meet: each operand's contiguous extent is a multiple of its
    alignment (TMA and cp.async move whole aligned vectors; can_implement checks the same)."""
    return (
        ("K" if config.layout_a == "t" else "M", config.alignment_a),
        ("K" if config.layout_b == "n" else "N", config.alignment_b),
        ("N", config.alignment_c),
    )


def requirement_text(config: CutlassGemmConfig) -> str:
    """``alignment_requirements`` in words: "K and N must be multiples of 8"."""
    multiple_of: dict[str, int] = {}
    for dim, multiple in alignment_requirements(config):
        multiple_of[dim] = math.lcm(multiple_of.get(dim, 1), multiple)
    by_multiple: dict[int, list[str]] = {}
    for dim, multiple in multiple_of.items():
        if multiple > 1:
            by_multiple.setdefault(multiple, []).append(dim)
    parts = [
        f"{' and '.join(dims)} must be {'multiples' if len(dims) > 1 else 'a multiple'} of {multiple}"
        for multiple, dims in sorted(by_multiple.items())
    ]
    return "; ".join(parts) if parts else "any M, N, K"


def fits_problem(config: CutlassGemmConfig, M: int, N: int, K: int) -> bool:
    """Whether ``config`` can serve an M x N x K problem: the alignments hold, and every CTA of a cluster
    gets a tile (a cluster wider than the problem's tile grid along M or N would spend whole CTAs on
    padding, and its multicast would share nothing)."""
    dims = {"M": M, "N": N, "K": K}
    if any(value <= 0 for value in dims.values()):
        return False
    if any(dims[dim] % multiple for dim, multiple in alignment_requirements(config)):
        return False
    tiles_m = -(-M // config.tile_shape[0])
    tiles_n = -(-N // config.tile_shape[1])
    return config.cluster_shape[0] <= tiles_m and config.cluster_shape[1] <= tiles_n


def filter_for_problem(
    configs: Iterable[CutlassGemmConfig], M: int, N: int, K: int
) -> tuple[CutlassGemmConfig, ...]:
    """The configs that can serve an M x N x K problem (``fits_problem``), in their order."""
    return tuple(config for config in configs if fits_problem(config, M, N, K))


# --- ranking ------------------------------------------------------------------------------------------
#
# A prior for a search whose trials cost a minute of nvcc each: which configurations of a listing to try
# first for one problem. It reads only the configuration and the problem, and every criterion is a fact
# of CUTLASS's SM90 kernels (the constants below are CUTLASS's own, cited), not a measurement.

H100_SM_COUNT = 132  # SMs of an H100 SXM and an H200: a wave of a persistent kernel is this many CTAs
_ELEMENT_BITS = {
    "f16": 16,
    "bf16": 16,
    "f32": 32,
    "tf32": 32,
    "e4m3": 8,
    "e5m2": 8,
    "s8": 8,
    "u8": 8,
    "s32": 32,
}
# detail::tma_alignment_bytes: KernelScheduleAuto takes TMA when both operands are this aligned
_TMA_ALIGNMENT_BITS = 128
# The warp-specialized kernels' "HeavyRegisterPressure" mark (sm90_gemm_tma_warpspecialized_cooperative
# .hpp, _pingpong.hpp): accumulator registers per consumer thread; setmaxnreg then gives a consumer 240
# registers at most, so 256 accumulators (a 256x256 fp32 tile over two warp groups) cannot stay in them.
_HEAVY_REGISTER_PRESSURE = 208
# PersistentTileSchedulerSm90StreamKParams::min_iters_per_sk_unit_: with this many K tiles per output
# tile or fewer, the stream-K scheduler splits nothing.
_STREAM_K_MIN_K_TILES = 8
# The estimated efficiency (``ProblemFit.efficiency``) is compared in 2% steps: closer than that, the
# model cannot tell configurations apart, and the criteria after it decide.
_EFFICIENCY_STEP = 0.02
# The machine the estimate is made for, an H200 (an H100 SXM has the same SMs, clocks and L2): what
# torch's dense fp16/bf16 GEMM reaches (769-798 TFLOP/s measured here, 2026-11-04), and the bytes a
# second HBM moves (4.3 TB/s device-to-device, reads and writes counted). _REUSE_KNEE is the arithmetic
# intensity, in FLOP per operand byte an SM loads from L2, above which a tile's MMAs, not its loads, set
# its pace: that rate over Hopper's L2 bandwidth (about 7 TB/s to the SMs; a lead, not measured here).
_GEMM_FLOPS = 780e12
_HBM_BYTES_S = 4.3e12
_REUSE_KNEE = 110.0

_COOPERATIVE = "cutlass::gemm::KernelTmaWarpSpecializedCooperative"
_PINGPONG = "cutlass::gemm::KernelTmaWarpSpecializedPingpong"
_CP_ASYNC = "cutlass::gemm::KernelCpAsyncWarpSpecialized"
_NO_SMEM_EPILOGUE = "cutlass::epilogue::NoSmemWarpSpecialized"


def effective_kernel_schedule(config: CutlassGemmConfig) -> str:
    """The kernel schedule CUTLASS builds: ``KernelScheduleAuto`` resolved as SM90's CollectiveBuilder
    does (sm90_gmma_builder.inl): TMA when A and B are 16-byte aligned, then Cooperative, or Pingpong for a
    tile 64 rows high (Cooperative needs 128); else KernelCpAsyncWarpSpecialized. Others as listed."""
    if _last(config.kernel_schedule) != "KernelScheduleAuto":
        return config.kernel_schedule
    aligned = all(
        (_ELEMENT_BITS.get(element, 0) * alignment) % _TMA_ALIGNMENT_BITS == 0
        for element, alignment in (
            (config.element_a, config.alignment_a),
            (config.element_b, config.alignment_b),
        )
    )
    if not aligned:
        return _CP_ASYNC
    return _PINGPONG if config.tile_shape[0] == 64 else _COOPERATIVE


def effective_epilogue_schedule(config: CutlassGemmConfig) -> str:
    """The epilogue schedule CUTLASS builds: ``EpilogueScheduleAuto`` is NoSmemWarpSpecialized on SM90
    (sm90_builder.inl); others as listed."""
    if _last(config.epilogue_schedule) == "EpilogueScheduleAuto":
        return _NO_SMEM_EPILOGUE
    return config.epilogue_schedule


@frozen
class ProblemFit:
    """What the ranking reads of one configuration at one M x N x K problem, and its sort key."""

    config: CutlassGemmConfig
    tma: bool  # a TMA mainloop (KernelTmaWarpSpecialized*, or Auto resolving to one)
    overlapped: bool  # cooperative or pingpong: persistent, the next tile loads during an epilogue
    accumulator_registers: int  # per consumer thread (CUTLASS's RegsPerThread)
    tiles: int  # output tiles, the grid rounded up to whole clusters
    waves: int  # ceil(tiles / sm_count)
    wave_efficiency: float  # busy CTA slots over all of them; 1.0 for stream-K that splits
    stream_k: bool
    stream_k_splits: bool  # a stream-K scheduler that, in its default Heuristic mode, splits work here
    cluster_size: int
    multicast_elements: int  # operand elements a CTA gets by TMA multicast per K block
    tma_epilogue: bool
    reuse_efficiency: float = 1.0  # the tile's FLOP per operand byte loaded over _REUSE_KNEE, at most 1
    epilogue_efficiency: float = 1.0  # the mainloop's share of a tile's time, the epilogue not hidden

    @property
    def efficiency(self) -> float:
        """The estimated share of the GEMM rate this configuration reaches on the problem: the waves' fill
        times the tile's operand reuse times the mainloop's share next to an epilogue it does not hide."""
        return self.wave_efficiency * self.reuse_efficiency * self.epilogue_efficiency

    @property
    def spills(self) -> bool:
        """The accumulators alone reach CUTLASS's heavy register pressure mark."""
        return self.accumulator_registers >= _HEAVY_REGISTER_PRESSURE

    @property
    def key(self) -> tuple[Any, ...]:
        """``rank_for_problem``'s sort key; smaller is better."""
        config = self.config
        stream_k_idle = self.stream_k and not self.stream_k_splits
        auto = "Auto" in _last(config.kernel_schedule) or "Auto" in _last(config.epilogue_schedule)
        vector_bits = min(
            _ELEMENT_BITS.get(config.element_a, 0) * config.alignment_a,
            _ELEMENT_BITS.get(config.element_b, 0) * config.alignment_b,
        )
        return (
            not self.tma,
            self.spills,
            stream_k_idle,
            not self.overlapped,
            -math.floor(self.efficiency / _EFFICIENCY_STEP + 1e-9),
            -(config.tile_shape[0] * config.tile_shape[1]),
            {2: 0, 1: 2}.get(self.cluster_size, 1),
            -self.multicast_elements,
            not self.tma_epilogue,
            auto,
            -vector_bits,
            _order(config),
        )

    @property
    def tier(self) -> tuple[bool, ...]:
        """The key's kind-of-kernel criteria (1-4 of ``rank_for_problem``): configs of one tier differ
        only in how well they fit the problem's shape."""
        return self.key[:4]

    @property
    def reasons(self) -> str:
        """The facts of ``key`` in words: "TMA, Cooperative, 128 accumulator registers/thread, 4 waves at
        97%, tile 128x256x64, cluster 2x1x1 (multicast 8192 elements/k-block), TMA epilogue, estimated
        89% (reuse 100%, epilogue 96%)"."""
        config = self.config
        schedule = _last(effective_kernel_schedule(config))
        kind = next(
            (word for word in ("Cooperative", "Pingpong") if word in schedule), "plain warp-specialized"
        )
        registers = f"{self.accumulator_registers} accumulator registers/thread"
        parts = ["TMA" if self.tma else "cp.async", kind, registers + (" (spills)" if self.spills else "")]
        if self.stream_k_splits:
            parts.append(f"{self.tiles} tiles, stream-K splits the K loop of the last waves")
        else:
            idle = ", stream-K idle (runs data-parallel)" if self.stream_k else ""
            parts.append(f"{self.waves} waves at {self.wave_efficiency:.0%}{idle}")
        parts.append(f"tile {_shape(config.tile_shape)}")
        parts.append(
            f"cluster {_shape(config.cluster_shape)} (multicast {self.multicast_elements} elements/k-block)"
        )
        parts.append("TMA epilogue" if self.tma_epilogue else "epilogue without shared memory")
        parts.append(
            f"estimated {self.efficiency:.0%} (reuse {self.reuse_efficiency:.0%}, "
            f"epilogue {self.epilogue_efficiency:.0%})"
        )
        return ", ".join(parts)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def problem_fit(
    config: CutlassGemmConfig, M: int, N: int, K: int, sm_count: int = H100_SM_COUNT
) -> ProblemFit:
    """The facts ``rank_for_problem`` orders ``config`` by at an M x N x K problem on ``sm_count`` SMs."""
    if sm_count <= 0 or min(M, N, K) <= 0:
        raise ConfigError(
            f"rank an M x N x K problem on a GPU with SMs: M={M} N={N} K={K} sm_count={sm_count}"
        )
    schedule = _last(effective_kernel_schedule(config))
    cooperative = "Cooperative" in schedule
    tile_m, tile_n, tile_k = config.tile_shape
    cluster_m, cluster_n, cluster_k = config.cluster_shape
    consumers = 256 if cooperative else 128  # two consumer warp groups share a cooperative tile
    accumulator_bits = _ELEMENT_BITS.get(config.element_accumulator, 32)
    registers = tile_m * tile_n * accumulator_bits // (consumers * 32)
    useful_m, useful_n = _ceil_div(M, tile_m), _ceil_div(N, tile_n)
    tiles = _ceil_div(useful_m, cluster_m) * cluster_m * _ceil_div(useful_n, cluster_n) * cluster_n
    useful = useful_m * useful_n
    waves = _ceil_div(tiles, sm_count)
    stream_k = "StreamK" in config.tile_scheduler
    # CUTLASS's Heuristic decomposition (PersistentTileSchedulerSm90StreamKParams::get_num_sk_tiles):
    # stream-K work only when the last wave is partial and less than half full, and a tile has more
    # than min_iters_per_sk_unit_ K tiles to split
    tail = tiles - (tiles // sm_count) * sm_count
    splits = stream_k and tail > 0 and 2 * tail < sm_count and _ceil_div(K, tile_k) > _STREAM_K_MIN_K_TILES
    efficiency = 1.0 if splits else useful / (waves * sm_count)
    # cluster CTAs along M share B's tile (tile_n x tile_k), along N A's (tile_m x tile_k): each CTA
    # loads 1/cluster of the shared tile and gets the rest by multicast
    multicast = (cluster_m - 1) * tile_n * tile_k // cluster_m + (
        cluster_n - 1
    ) * tile_m * tile_k // cluster_n
    # reuse: the MMA FLOPs of a K block over the operand bytes the CTA itself loads for it (A's tile is
    # shared by the cluster's CTAs along N, B's by those along M)
    operand_bits = (_ELEMENT_BITS.get(config.element_a, 16) + _ELEMENT_BITS.get(config.element_b, 16)) / 2
    loaded_bytes = (tile_m / cluster_n + tile_n / cluster_m) * tile_k * operand_bits / 8
    intensity = 2 * tile_m * tile_n * tile_k / loaded_bytes
    reuse = min(1.0, intensity / _REUSE_KNEE)
    # the epilogue: a tile's output written to HBM against its mainloop's MMAs (at the reuse-bound
    # rate). The tile's size cancels: out_bytes * GEMM rate / (2 K * bandwidth), per output element.
    # Pingpong runs one consumer's epilogue beside the other's MMAs and hides it; the others do not.
    out_bits = _ELEMENT_BITS.get(config.element_c, 16)
    exposed = (out_bits / 8) * _GEMM_FLOPS * reuse / (2 * K * _HBM_BYTES_S)
    epilogue = 1.0 if "Pingpong" in schedule else 1.0 / (1.0 + exposed)
    return ProblemFit(
        config=config,
        tma="KernelTma" in schedule,
        overlapped=cooperative or "Pingpong" in schedule,
        accumulator_registers=registers,
        tiles=tiles,
        waves=waves,
        wave_efficiency=efficiency,
        stream_k=stream_k,
        stream_k_splits=splits,
        cluster_size=cluster_m * cluster_n * cluster_k,
        multicast_elements=multicast,
        tma_epilogue=_last(effective_epilogue_schedule(config)).startswith("TmaWarpSpecialized"),
        reuse_efficiency=reuse,
        epilogue_efficiency=epilogue,
    )


def rank_for_problem(
    configs: Iterable[CutlassGemmConfig], M: int, N: int, K: int, sm_count: int = H100_SM_COUNT
) -> tuple[CutlassGemmConfig, ...]:
    """``configs`` best-first for an M x N x K problem on a GPU of ``sm_count`` SMs: a prior from CUTLASS's
    Hopper facts, deterministic, for the first trials of a search (``ProblemFit.key``), comparing in turn:

    1. a TMA mainloop (KernelTmaWarpSpecialized*, or KernelScheduleAuto, which takes TMA for 16-byte
       aligned operands) before cp.async (no multicast, the load issued by the producer warps' threads);
    2. accumulators that fit: fewer than CUTLASS's HeavyRegisterPressure mark (208 registers per consumer
       thread; a 256x256 fp32 tile over two warp groups needs 256) before those that spill;
    3. no StreamKScheduler that would not split: in its default Heuristic mode it splits the K loop only
       when the last wave of output tiles is partial and under half full (fewer than two waves, or a
       poor last wave) and a tile has more than 8 K tiles; elsewhere it runs data-parallel with extra
       bookkeeping, so it ranks after the plain scheduler; where it splits, it fills every SM;
    4. a Cooperative or Pingpong schedule before the plain warp-specialized one: they are persistent,
       their producer warp group loads the next tile during the epilogue (Pingpong also runs one
       consumer's epilogue beside the other's MMAs); the plain one computes one tile per CTA;
    5. a higher estimated efficiency (``ProblemFit.efficiency``), in 2% steps: the product of the wave
       efficiency (output tiles, the grid rounded up to whole clusters, over waves * ``sm_count`` CTAs;
       1.0 for stream-K that splits), the tile's operand reuse (its MMA FLOPs per operand byte the CTA
       loads, multicast shares counted, over the intensity at which MMAs and not loads set the pace,
       at most 1) and the mainloop's share of a tile's time next to an epilogue it does not hide
       (Pingpong hides it; elsewhere writing the output costs about 180 / K of the mainloop, which
       matters at small K);
    6. a larger CTA tile (2. already put tiles too large for registers last);
    7. a 2-CTA cluster (TMA multicast of one operand) before larger clusters (that many CTAs must be
       co-scheduled on one GPC), before none; then more multicast elements (the cluster along the
       dimension whose shared operand tile is larger);
    8. a TMA epilogue before the epilogue without shared memory (which EpilogueScheduleAuto is);
    9. an explicit schedule before Auto (the same kernel, named), wider operand vectors, then the
       listing's order.
    """
    fits = [problem_fit(config, M, N, K, sm_count) for config in configs]
    return tuple(fit.config for fit in sorted(fits, key=lambda fit: fit.key))


def diverse_order(
    ranked: Iterable[CutlassGemmConfig], tier: Callable[[CutlassGemmConfig], Hashable] | None = None
) -> tuple[CutlassGemmConfig, ...]:
    """``ranked`` (best first) with the first config of each distinct (tile shape, effective kernel
    schedule) moved to the front, in rank order, then the others in rank order: a prefix of N configs
    tries N different kernels before variants of one (its epilogue, cluster, scheduler or alignment).

    With ``tier`` (a function of a config, constant over runs of ``ranked``), this is done within each
    run of one tier, and the runs keep their order: a kernel of a worse tier is not tried before the
    variants of a better one."""
    ordered: list[CutlassGemmConfig] = []
    for _, run in itertools.groupby(ranked, key=tier or (lambda config: 0)):
        leaders: list[CutlassGemmConfig] = []
        others: list[CutlassGemmConfig] = []
        seen: set[tuple[tuple[int, int, int], str]] = set()
        for config in run:
            kind = (config.tile_shape, effective_kernel_schedule(config))
            (others if kind in seen else leaders).append(config)
            seen.add(kind)
        ordered += leaders + others
    return tuple(ordered)


def seed_order(
    configs: Iterable[CutlassGemmConfig], M: int, N: int, K: int, sm_count: int = H100_SM_COUNT
) -> tuple[CutlassGemmConfig, ...]:
    """The order in which a search tries ``configs`` first at an M x N x K problem: ``rank_for_problem``,
    made diverse (``diverse_order``) within each tier of ``ProblemFit.tier`` (TMA or not, spilling or
    not, idle stream-K or not, overlapped schedule or not)."""
    fits = {config.id: problem_fit(config, M, N, K, sm_count) for config in configs}
    ranked = [fit.config for fit in sorted(fits.values(), key=lambda fit: fit.key)]
    return diverse_order(ranked, tier=lambda config: fits[config.id].tier)


def config_distance(a: CutlassGemmConfig, b: CutlassGemmConfig) -> float:
    """How far apart two configurations are, for a search that proposes near its best so far: octaves
    between their tile extents and cluster extents, plus one for each schedule (the kernel schedule and
    the epilogue schedule as CUTLASS builds them, the tile scheduler) that differs and a half for the
    stages or the alignment. 0 only for the same kernel as CUTLASS
    builds it (an Auto schedule and the one it resolves to are one)."""
    octaves = sum(
        abs(math.log2(x / y))
        for x, y in zip(a.tile_shape + a.cluster_shape, b.tile_shape + b.cluster_shape, strict=True)
    )
    schedules = sum(
        x != y
        for x, y in (
            (effective_kernel_schedule(a), effective_kernel_schedule(b)),
            (effective_epilogue_schedule(a), effective_epilogue_schedule(b)),
            (a.tile_scheduler, b.tile_scheduler),
        )
    )
    details = 0.5 * (a.stages != b.stages) + 0.5 * (
        (a.alignment_a, a.alignment_b) != (b.alignment_a, b.alignment_b)
    )
    return octaves + schedules + details


def nearest(
    ranked: Sequence[CutlassGemmConfig], best: CutlassGemmConfig | None, skip: Iterable[str] = ()
) -> CutlassGemmConfig | None:
    """The configuration of ``ranked`` (best-first by the prior, ``seed_order``) to try next: with no
    ``best`` so far the first not in ``skip`` (ids evaluated or in flight), else the one nearest ``best``
    (``config_distance``), ties to the prior's order; None when every one is skipped."""
    skipped = set(skip)
    left = [(index, config) for index, config in enumerate(ranked) if config.id not in skipped]
    if not left:
        return None
    if best is None:
        return left[0][1]
    return min(left, key=lambda item: (config_distance(best, item[1]), item[0]))[1]


# --- kernels ------------------------------------------------------------------------------------------


def _last(tag: str) -> str:
    return tag.rsplit("::", 1)[-1]


def _shape(values: Sequence[int]) -> str:
    return "x".join(str(value) for value in values)


_LAYOUT_A_TEXT = {
    "t": "row-major, K contiguous -> a torch tensor of shape (M, K)",
    "n": "column-major, M contiguous -> a torch tensor of shape (K, M) holding A transposed",
}
_LAYOUT_B_TEXT = {
    "t": "row-major, N contiguous -> a torch tensor of shape (K, N)",
    "n": "column-major, K contiguous -> a torch tensor of shape (N, K) holding B transposed",
}
_LAYOUT_TAG = {"t": "RowMajor", "n": "ColumnMajor"}


@functools.cache
def _template() -> string.Template:
    text = (importlib.resources.files("kopt_cutlass") / "templates" / TEMPLATE).read_text()
    return string.Template(text)


def _argument(element: str, kernel_pointer: str, name: str) -> str:
    """solve's pointer as the kernel's element pointer (a cast only where the types differ: tf32)."""
    if ELEMENTS[element].pointer == ELEMENTS[element].cutlass:
        return name
    return f"reinterpret_cast<{kernel_pointer}>({name})"


def render_kernel(config: CutlassGemmConfig) -> str:
    """The kernel file's text for ``config`` (see ``emit_kernel``)."""
    for role, element in (
        ("A", config.element_a),
        ("B", config.element_b),
        ("C", config.element_c),
        ("accumulator", config.element_accumulator),
        ("epilogue", config.element_epilogue),
    ):
        _element(f"{role} element", element)
    if config.layout_a not in _LAYOUT_TAG or config.layout_b not in _LAYOUT_TAG:
        raise ConfigError(f"layouts {config.layouts!r}: each letter must be t or n")
    a, b, c = ELEMENTS[config.element_a], ELEMENTS[config.element_b], ELEMENTS[config.element_c]
    inputs = f"{a.words} inputs" if a == b else f"{a.words} A, {b.words} B"
    summary = f"{inputs}, {ELEMENTS[config.element_accumulator].words} accumulation and {c.words} output"
    stage_count = (
        f"cutlass::gemm::collective::StageCount<{config.stages}>"
        if config.stages
        else "cutlass::gemm::collective::StageCountAutoCarveout<\n"
        "        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>"
    )
    values = {
        "config_id": config.id,
        "summary": summary,
        "listing": config.listing or "provenance not recorded",
        "procedural_name": config.procedural_name,
        "tile": _shape(config.tile_shape),
        "cluster": _shape(config.cluster_shape),
        "stages_text": str(config.stages) if config.stages else "auto (as many as fit beside the epilogue)",
        "kernel_schedule": config.kernel_schedule,
        "epilogue_schedule": config.epilogue_schedule,
        "tile_scheduler_text": config.tile_scheduler or "the kernel schedule's default",
        "element_a": config.element_a,
        "element_b": config.element_b,
        "element_c": config.element_c,
        "element_accumulator": config.element_accumulator,
        "element_epilogue": config.element_epilogue,
        "alignment_a": config.alignment_a,
        "alignment_b": config.alignment_b,
        "alignment_c": config.alignment_c,
        "layout_a_text": _LAYOUT_A_TEXT[config.layout_a],
        "layout_b_text": _LAYOUT_B_TEXT[config.layout_b],
        "requirement": requirement_text(config),
        "cxx_a": a.cutlass,
        "cxx_b": b.cutlass,
        "cxx_c": c.cutlass,
        "cxx_accumulator": ELEMENTS[config.element_accumulator].cutlass,
        "cxx_epilogue": ELEMENTS[config.element_epilogue].cutlass,
        "layout_a_tag": _LAYOUT_TAG[config.layout_a],
        "layout_b_tag": _LAYOUT_TAG[config.layout_b],
        "tile_m": config.tile_shape[0],
        "tile_n": config.tile_shape[1],
        "tile_k": config.tile_shape[2],
        "cluster_m": config.cluster_shape[0],
        "cluster_n": config.cluster_shape[1],
        "cluster_k": config.cluster_shape[2],
        "stage_count": stage_count,
        "tile_scheduler_argument": f",\n    {config.tile_scheduler}" if config.tile_scheduler else "",
        "log_name": f"kopt cutlass gemm {config.id}",
        "pointer_a": a.pointer,
        "pointer_b": b.pointer,
        "pointer_c": c.pointer,
        "argument_a": _argument(config.element_a, "ElementA const*", "A"),
        "argument_b": _argument(config.element_b, "ElementB const*", "B"),
        "argument_c": _argument(config.element_c, "ElementD*", "C"),
    }
    return _template().substitute(values)


def emit_kernel(config: CutlassGemmConfig, path: str | os.PathLike[str]) -> Path:
    """Write ``config`` as a kopt CUTLASS kernel file at ``path`` (folders made as needed; written
    atomically) and return its path. The file builds with kopt's CUTLASS backend for sm_90a and exposes
    ``extern "C" void solve(const A* A, const B* B, C* C, int M, int N, int K)``: C = A @ B, alpha 1,
    beta 0, C row-major (M, N); A and B laid out as ``config.layouts`` says (for ``tn``, the buffers of
    examples/cutlass/gemm_sm90_tma_ws/ref.py: A (M, K), B (N, K))."""
    return write_text_atomic(path, render_kernel(config))

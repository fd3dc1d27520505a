"""What step 3b persists: the device ceilings, the roofline gaps and budgets (roofline.json) and the
top ncu metrics per axis (ncu_top.json). Frozen attrs; JSON through ``kopt_core.records.to_data``.

``DEFAULT_CEILINGS`` are docs/measurement.md's H200 figures, what a profile is read against when nothing
was measured; ``kopt_core.roofline.ceilings`` measures a device's own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from attrs import field, frozen

from kopt_core.records.fields import as_tuple
from kopt_core.records.versions import (
    CEILINGS_SCHEMA_VERSION,
    NCU_TOP_SCHEMA_VERSION,
    ROOFLINE_SCHEMA_VERSION,
)

AXES: tuple[str, ...] = ("compute", "memory", "latency")  # also the budget's tie-break order

Bound = Literal["compute", "memory", "latency", "unknown"]
Label = Literal["roofline", "bottleneck-gap heuristic"]


@frozen
class Ceilings:
    """What the device can do at best: bandwidth (bytes read + written per second) and dense matmul
    throughput per dtype name ("float16", "bfloat16", "tf32", "float32", "float64", "float8_e4m3fn";
    "int8" in integer operations per second)."""

    device: str
    bandwidth_bytes_per_s: float
    flops_per_s: dict[str, float] = field(factory=dict)
    source: str = ""  # "measured on <device> <date>", or where DEFAULT_CEILINGS' figures were taken from
    details: dict[str, Any] = field(factory=dict)  # how each figure was measured, per-method results, skips
    # L2 size: up to this many dirty bytes drain to DRAM after a kernel's timed end, so a kernel moving
    # few bytes can read above the bandwidth ceiling by about l2_cache_bytes / bytes moved
    l2_cache_bytes: int | None = None
    schema_version: int = CEILINGS_SCHEMA_VERSION


H200_L2_BYTES = 62914560  # torch.cuda.get_device_properties(0).L2_cache_size on the lent H200 (60 MiB)

DEFAULT_CEILINGS = Ceilings(
    device="NVIDIA H200",
    bandwidth_bytes_per_s=4.28e12,
    flops_per_s={
        "bfloat16": 801e12,
        "float16": 769e12,
        "tf32": 414e12,
        "float32": 50.9e12,
        # torch._int_mm (cuBLASLt) at 8192^3, the best of 5 runs on the H200, 2026-12-01: what a library
        # reaches, far below the datasheet's dense int8 rate; a kernel above it reads below_floor
        "int8": 127e12,
    },
    source="MEASUREMENT.md (H200, 2026-11-29; int8 2026-12-01)",
    l2_cache_bytes=H200_L2_BYTES,
    details={
        "bandwidth": "PyTorch device-to-device copy, bytes read + written",
        "flops": "dense torch.matmul per dtype; float32 with TF32 off",
        "note": "measure the ceilings on the device (kopt gate, or measure_ceilings) before trusting "
        "below_floor",
    },
)


@frozen
class Achieved:
    """The rates a kernel reached, from the workload model over its measured duration."""

    flops_per_s: float
    bytes_per_s: float
    arithmetic_intensity: float | None  # FLOP per byte (None when the model moves no bytes)
    duration_ms: float


def _budget(value: Mapping[str, Any]) -> dict[str, int]:
    return {axis: int(value.get(axis, 0)) for axis in AXES}


@frozen
class Roofline:
    """roofline.json: the three gaps (1 - utilisation, in [0, 1], None = unknown), the bound, the axis
    budget for method selection and whether an early stop (near_peak) is allowed, each decision
    explained in ``reasons``."""

    delta_compute: float | None
    delta_memory: float | None
    delta_latency: float | None
    bound: Bound
    near_peak: bool
    axis_budget: dict[str, int] = field(converter=_budget)
    label: Label
    reasons: tuple[str, ...] = field(default=(), converter=as_tuple)
    achieved: Achieved | None = None
    ceilings: Ceilings | None = None
    peak_dtype: str | None = None
    floor_ms: float | None = None  # max(flops / peak, bytes_min / bandwidth) over the floors known
    below_floor: bool = False  # measured faster than the roofline allows: a measurement bug or a cheat
    # utilisations before clamping (fractions: 1.0 = at the ceiling); None = unknown
    compute_utilization: float | None = None
    memory_utilization: float | None = None
    latency_metric: str | None = None  # the stall key whose share gave delta_latency
    duration_ms: float | None = None
    schema_version: int = ROOFLINE_SCHEMA_VERSION


@frozen
class TopMetric:
    """One ranked ncu metric with the sentence that makes it evidence."""

    key: str  # canonical key of the metric registry
    ncu_name: str
    value: float | None
    unit: str
    badness: float | None  # 0 (fine) .. 1 (as bad as it gets); None when not a percentage
    evidence: str  # "sm__throughput 65.5% of peak: 34.5% headroom"
    bad_when: str = ""  # high | low | neither
    status: str = "measured"  # measured | derived


def _axes(value: Mapping[str, Iterable[TopMetric]]) -> dict[str, tuple[TopMetric, ...]]:
    return {axis: tuple(value.get(axis, ())) for axis in AXES}


@frozen
class NcuTop:
    """ncu_top.json: the top ``ncu_num`` metrics per axis of the champion's profile."""

    ncu_num: int
    bundle: str  # full | light
    bundle_reason: str
    duration_ms: float | None
    axes: dict[str, tuple[TopMetric, ...]] = field(converter=_axes)
    unknown: tuple[str, ...] = field(default=(), converter=as_tuple)  # registry keys ncu gave no value for
    kernels: int = 1
    # Every registry key's value (null when unknown): what method selection evaluates triggers on.
    values: dict[str, Any] = field(factory=dict)
    schema_version: int = NCU_TOP_SCHEMA_VERSION

"""The workload roofline: the reference's workload model (flops, bytes_min) over the kernel's measured
duration gives its achieved rates; utilisation = achieved rate / the device's measured ceiling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kopt_core.records.roofline import Achieved, Ceilings
from kopt_core.roofline.reading import LABEL_ROOFLINE, AxisReading, clamp01, format_rate, known, pct

BELOW_FLOOR_TOLERANCE = 0.02  # a utilisation above 1.02 means the kernel beat the roofline


def write_back_allowance(ceilings: Ceilings, bytes_moved: float) -> float:
    """How far above the bandwidth ceiling a kernel may honestly read: the dirty lines still in L2 when
    it ends (at most the L2's size) reach DRAM after its timed end. On the H200 a 64M-element vector add
    (805 MB moved) read 4.38 TB/s against 4.31 TB/s for a 1 GiB add; 0 when the L2 size is unknown."""
    if not ceilings.l2_cache_bytes or bytes_moved <= 0:
        return 0.0
    return ceilings.l2_cache_bytes / bytes_moved


def workload_field(workload: Mapping | Any | None, name: str) -> float | None:
    if workload is None:
        return None
    if isinstance(workload, Mapping):
        return known(workload.get(name))
    return known(getattr(workload, name, None))


def why_no_roofline(
    workload: Mapping | Any | None, duration: float | None, ceilings: Ceilings | None
) -> str | None:
    """Why the workload roofline cannot be computed (the first reason roofline.json gives for falling back
    to the bottleneck-gap heuristic), or None when it can."""
    if workload is None:
        return "no workload model: bottleneck-gap heuristic from ncu's speed-of-light percentages"
    flops = workload_field(workload, "flops")
    bytes_min = workload_field(workload, "bytes_min")
    missing = []
    if flops is None or flops < 0:
        missing.append("the workload model's flops")
    if bytes_min is None or bytes_min <= 0:
        missing.append("the workload model's bytes_min")
    if ceilings is None:
        missing.append("device ceilings")
    elif not (known(ceilings.bandwidth_bytes_per_s) or 0) > 0:
        missing.append("a bandwidth ceiling")
    if duration is None or duration <= 0:
        missing.append("a measured duration")
    if missing:
        return "workload model present but " + ", ".join(missing) + " missing: bottleneck-gap heuristic"
    return None


def default_bytes_min(buffers: Sequence[Any]) -> int | None:
    """kopt's default workload model for a reference without ``workload_model``: each input read once,
    each output written once, an in-out buffer both (``buffers``: records with ``bytes`` and ``role``);
    None without buffers."""
    if not buffers:
        return None
    return sum(b.bytes * (2 if b.role == "inout" else 1) for b in buffers)


def default_memory_floor(
    bytes_min: float, duration_ms: float | None, ceilings: Ceilings | None
) -> tuple[float | None, str]:
    """(floor_ms, why) of kopt's default workload model (every buffer moved once, no flops) on
    ``ceilings``. The floor is dropped (None) when the kernel ran faster than it allows, beyond the
    write-back allowance: then the kernel touches less than its whole buffers (a gather, a sparse
    update) and the default model overstates its traffic."""
    bandwidth = known(ceilings.bandwidth_bytes_per_s) if ceilings is not None else None
    if ceilings is None or not bandwidth or bandwidth <= 0 or bytes_min <= 0:
        return None, "no memory floor: no bandwidth ceiling or no bytes"
    floor_ms = bytes_min / bandwidth * 1e3
    if duration_ms is None or duration_ms <= 0:
        return None, "no memory floor: no measured duration"
    allowed = 1.0 + BELOW_FLOOR_TOLERANCE + write_back_allowance(ceilings, bytes_min)
    if floor_ms > duration_ms * allowed:
        return None, (
            f"no memory floor: moving every buffer once ({format_rate(bytes_min, 'B')}) takes "
            f"{floor_ms:.4g} ms at {format_rate(bandwidth, 'B/s')}, but the kernel took "
            f"{duration_ms:.4g} ms: it touches less than its whole buffers, so the default model does not "
            "bound it"
        )
    return floor_ms, (
        f"memory floor {floor_ms:.4g} ms: every buffer moved once ({format_rate(bytes_min, 'B')}) at "
        f"{format_rate(bandwidth, 'B/s')}; the reference has no workload_model, so no compute floor"
    )


def workload_roofline(
    workload: Mapping | Any, duration: float, ceilings: Ceilings, peak_dtype: str | None
) -> AxisReading:
    """The utilisations of a kernel whose inputs ``why_no_roofline`` accepted. ``peak_dtype`` is the key
    of ``ceilings.flops_per_s`` the kernel's math runs at."""
    flops = workload_field(workload, "flops")
    bytes_min = workload_field(workload, "bytes_min")
    if flops is None or bytes_min is None:
        raise ValueError(
            "workload_roofline needs a workload model with flops and bytes_min (why_no_roofline)"
        )
    seconds = duration / 1e3
    achieved = Achieved(
        flops_per_s=flops / seconds,
        bytes_per_s=bytes_min / seconds,
        arithmetic_intensity=flops / bytes_min,
        duration_ms=duration,
    )
    bandwidth = float(ceilings.bandwidth_bytes_per_s)
    memory_util = achieved.bytes_per_s / bandwidth
    memory_floor_s = bytes_min / bandwidth
    memory_reason = (
        f"memory utilisation {pct(memory_util)}: {format_rate(achieved.bytes_per_s, 'B/s')} of "
        f"{format_rate(bandwidth, 'B/s')} ({ceilings.source or 'ceilings'})"
    )
    compute_util, compute_floor_s, compute_reason = _compute(flops, achieved, ceilings, peak_dtype)
    floor_ms = max(f * 1e3 for f in (compute_floor_s, memory_floor_s) if f is not None)
    tolerance = {
        "compute": BELOW_FLOOR_TOLERANCE,
        "memory": BELOW_FLOOR_TOLERANCE + write_back_allowance(ceilings, bytes_min),
    }
    below_floor, ceiling_reasons = _over_ceiling(
        {"compute": compute_util, "memory": memory_util}, tolerance, duration, floor_ms
    )
    # a model without arithmetic has no compute gap, though its compute utilisation (0) would say 1
    delta_compute = None if compute_util is None else 0.0 if flops == 0 else 1.0 - clamp01(compute_util)
    return AxisReading(
        label=LABEL_ROOFLINE,
        compute_util=compute_util,
        memory_util=memory_util,
        delta_compute=delta_compute,
        delta_memory=1.0 - clamp01(memory_util),
        reasons=(memory_reason, compute_reason, *ceiling_reasons),
        achieved=achieved,
        ceilings=ceilings,
        compute_floor_s=compute_floor_s,
        memory_floor_s=memory_floor_s,
        floor_ms=floor_ms,
        below_floor=below_floor,
    )


def _compute(
    flops: float, achieved: Achieved, ceilings: Ceilings, peak_dtype: str | None
) -> tuple[float | None, float | None, str]:
    """(compute utilisation, compute floor in seconds, the reason); both None when the peak is unknown."""
    if flops == 0:
        return 0.0, 0.0, "the workload model does no arithmetic (flops 0): no compute gap (0)"
    if peak_dtype is None:
        return None, None, "compute gap unknown: no peak dtype given for the kernel's math"
    if (known(ceilings.flops_per_s.get(peak_dtype)) or 0) <= 0:
        names = ", ".join(sorted(ceilings.flops_per_s)) or "none"
        return None, None, f"compute gap unknown: no {peak_dtype} peak in the ceilings (known: {names})"
    peak = float(ceilings.flops_per_s[peak_dtype])
    util = achieved.flops_per_s / peak
    reason = (
        f"compute utilisation {pct(util)}: {format_rate(achieved.flops_per_s, 'FLOP/s')} of the "
        f"{peak_dtype} peak {format_rate(peak, 'FLOP/s')}"
    )
    return util, flops / peak, reason


def _over_ceiling(
    utils: Mapping[str, float | None], tolerance: Mapping[str, float], duration: float, floor_ms: float
) -> tuple[bool, list[str]]:
    """(below_floor, reasons): a utilisation above 1 only clamps its gap to 0; one above 1 + its
    tolerance means the measured time beat the roofline floor."""
    below_floor = False
    reasons = []
    for axis, util in utils.items():
        if util is None:
            continue
        if util > 1.0:
            reasons.append(f"{axis} utilisation {pct(util)} is above the ceiling: gap clamped to 0")
        if util > 1.0 + tolerance[axis]:
            below_floor = True
            reasons.append(
                f"BELOW FLOOR: {duration:.6g} ms is faster than the roofline floor {floor_ms:.6g} ms "
                f"({axis} more than {pct(tolerance[axis])} over its ceiling): a measurement bug, a "
                "cheat, or a ceiling measured too low; never report it as a win"
            )
    return below_floor, reasons

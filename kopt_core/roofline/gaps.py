"""Step 3b: roofline gaps, the bound, the evidence-driven axis budget, and the top ncu metrics per axis.

Two ways to get the compute and memory gaps:

* ``roofline`` - the reference exposes a workload model (flops, bytes_min) and device ceilings and a
  measured duration are known: utilisation = achieved rate / ceiling.
* ``bottleneck-gap heuristic`` - no workload model: ncu's speed-of-light percentages stand in for the
  utilisations. A heuristic never allows near_peak.

The latency gap is the largest warp-stall share (percentage of stall cycles per reason) / 100 in both.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from kopt_core.roofline.records import AXES, Achieved, Ceilings, NcuTop, Roofline, TopMetric

BUDGET_TOTAL = 3
BUDGET_CAP = 2
NEAR_PEAK_DELTA = 0.15  # near_peak needs every gap below this
BELOW_FLOOR_TOLERANCE = 0.02  # a utilisation above 1.02 means the kernel beat the roofline
LATENCY_BOUND_UTIL = 0.5  # both utilisations under this ...
LATENCY_BOUND_DELTA = 0.5  # ... and a stall share at least this: latency-bound

STALL_PREFIX = "warp_stall_"
STALL_SUFFIX = "_pct"
# Reasons a warp is counted in that are not waiting on anything: "selected" is the warp that issued,
# "not_selected" was ready but another warp issued (plenty of parallelism, not a latency problem).
NOT_LATENCY_STALLS = frozenset({"warp_stall_selected_pct", "warp_stall_not_selected_pct"})

IDLE_PCT = 0.1  # a 'low is bad' percentage below this is an idle unit, not a bottleneck (top_metrics)
SATURATED_PCT = 80.0  # a unit this busy is a bound of the kernel (ncu's speed-of-light reading)

LABEL_ROOFLINE = "roofline"
LABEL_HEURISTIC = "bottleneck-gap heuristic"


# ---------------------------------------------------------------------------------------------- helpers


def write_back_allowance(ceilings: Ceilings, bytes_moved: float) -> float:
    """How far above the bandwidth ceiling a kernel may honestly read: the dirty lines still in L2 when
    it ends (at most the L2's size) reach DRAM after its timed end. On the H200 a 64M-element vector add
    (805 MB moved) read 4.38 TB/s against 4.31 TB/s for a 1 GiB add; 0 when the L2 size is unknown."""
    if not ceilings.l2_cache_bytes or bytes_moved <= 0:
        return 0.0
    return ceilings.l2_cache_bytes / bytes_moved


def _known(value: Any) -> float | None:
    """A number, or None when unknown (None, NaN, not a number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def _pct(fraction: float) -> str:
    return f"{100.0 * fraction:.1f}%"


def _workload_field(workload: Any, name: str) -> float | None:
    if workload is None:
        return None
    if isinstance(workload, Mapping):
        return _known(workload.get(name))
    return _known(getattr(workload, name, None))


def format_rate(value: float, unit: str) -> str:
    """A rate with an SI prefix: format_rate(4.28e12, "B/s") == "4.28 TB/s"."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def latency_gap(metrics: Mapping[str, Any]) -> tuple[float | None, str | None, str]:
    """(delta_latency, the stall key it came from, the reason in words)."""
    shares = {
        key: _known(value)
        for key, value in metrics.items()
        if key.startswith(STALL_PREFIX) and key.endswith(STALL_SUFFIX) and key not in NOT_LATENCY_STALLS
    }
    shares = {key: value for key, value in shares.items() if value is not None}
    if not shares:
        return None, None, "latency gap unknown: no warp-stall share was measured"
    # the largest share; ties go to the key that sorts first, so the answer does not depend on order
    key = min(shares, key=lambda k: (-shares[k], k))
    delta = _clamp01(shares[key] / 100.0)
    return delta, key, f"latency gap {delta:.3f} = largest warp-stall share {key} {shares[key]:.1f}% / 100"


# ------------------------------------------------------------------------------------------- the budget


def _largest_remainder(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Split ``total`` proportionally to ``weights`` into integers summing to ``total``; remainders
    that tie go in AXES order (compute, memory, latency)."""
    weight_sum = sum(weights.values())
    quotas = {axis: total * weight / weight_sum for axis, weight in weights.items()}
    shares = {axis: int(math.floor(quota)) for axis, quota in quotas.items()}
    left = total - sum(shares.values())
    order = sorted(weights, key=lambda axis: (-round(quotas[axis] - shares[axis], 9), AXES.index(axis)))
    for axis in order[:left]:
        shares[axis] += 1
    return shares


def axis_budget(
    deltas: Mapping[str, float | None], *, total: int = BUDGET_TOTAL, cap: int = BUDGET_CAP
) -> tuple[dict[str, int], list[str]]:
    """The seed's rule: slots proportional to the known gaps, rounded by largest remainder so that they
    sum to ``total``, at most ``cap`` per axis (what a cap removes goes to the other known axes by the
    same rule, never above the cap). Unknown gaps and gaps of 0 get nothing. Returns (budget, reasons)."""
    budget = {axis: 0 for axis in AXES}
    reasons: list[str] = []
    active: dict[str, float] = {}
    for axis in AXES:
        delta = deltas.get(axis)
        if delta is None:
            reasons.append(f"budget {axis}=0: its gap is unknown")
        elif delta <= 0.0:
            reasons.append(f"budget {axis}=0: its gap is 0")
        else:
            active[axis] = float(delta)
    if not active:
        reasons.append("no axis has a known, non-zero gap: every budget is 0")
        return budget, reasons

    weight_sum = sum(active.values())
    quota_text = ", ".join(f"{axis} {total * d / weight_sum:.2f}" for axis, d in active.items())
    reasons.append(f"budget proportional to the known gaps (total {total}, cap {cap}): quotas {quota_text}")
    remaining = total
    while active and remaining > 0:
        shares = _largest_remainder(remaining, active)
        over = [axis for axis in AXES if axis in shares and shares[axis] > cap]
        if not over:
            for axis, share in shares.items():
                budget[axis] = share
            remaining = 0
            break
        for axis in over:
            budget[axis] = cap
            remaining -= cap
            del active[axis]
            others = ", ".join(active) or "no other known axis"
            reasons.append(
                f"budget {axis} capped at {cap} (its share was {shares[axis]}); the rest goes to {others}"
            )
    if remaining > 0:
        reasons.append(f"{remaining} slot(s) left unspent: no other known axis can take them under the cap")
    reasons.append("budget " + ", ".join(f"{axis}={budget[axis]}" for axis in AXES))
    return budget, reasons


# -------------------------------------------------------------------------------------- the roofline


def compute_roofline(
    metrics: Mapping[str, float | None],
    *,
    duration_ms: float | None,
    workload: Mapping | Any | None,
    ceilings: Ceilings | None,
    peak_dtype: str | None,
) -> Roofline:
    """Gaps, bound, axis budget and near_peak for one kernel.

    ``metrics`` maps canonical registry keys to values (None = unknown): "sm_throughput_pct",
    "memory_throughput_pct", "dram_throughput_pct", "tensor_pipe_utilization_pct", "warp_stall_*_pct".
    ``workload`` is the reference's workload model ({"flops", "bytes_min"}, or a record with them),
    ``peak_dtype`` the key of ``ceilings.flops_per_s`` the kernel's math runs at.
    """
    reasons: list[str] = []
    duration = _known(duration_ms)
    flops = _workload_field(workload, "flops")
    bytes_min = _workload_field(workload, "bytes_min")

    delta_latency, latency_metric, latency_reason = latency_gap(metrics)

    use_roofline = True
    if workload is None:
        use_roofline = False
        reasons.append("no workload model: bottleneck-gap heuristic from ncu's speed-of-light percentages")
    else:
        missing = []
        if flops is None or flops < 0:
            missing.append("the workload model's flops")
        if bytes_min is None or bytes_min <= 0:
            missing.append("the workload model's bytes_min")
        if ceilings is None:
            missing.append("device ceilings")
        elif not (_known(ceilings.bandwidth_bytes_per_s) or 0) > 0:
            missing.append("a bandwidth ceiling")
        if duration is None or duration <= 0:
            missing.append("a measured duration")
        if missing:
            use_roofline = False
            reasons.append(
                "workload model present but " + ", ".join(missing) + " missing: bottleneck-gap heuristic"
            )

    achieved = None
    floor_ms = None
    below_floor = False
    compute_util = memory_util = None
    delta_compute = delta_memory = None
    peak = None
    if use_roofline:
        seconds = duration / 1e3
        achieved = Achieved(
            flops_per_s=flops / seconds,
            bytes_per_s=bytes_min / seconds,
            arithmetic_intensity=flops / bytes_min,
            duration_ms=duration,
        )
        bandwidth = float(ceilings.bandwidth_bytes_per_s)
        memory_util = achieved.bytes_per_s / bandwidth
        memory_floor_ms = bytes_min / bandwidth * 1e3
        reasons.append(
            f"memory utilisation {_pct(memory_util)}: {format_rate(achieved.bytes_per_s, 'B/s')} of "
            f"{format_rate(bandwidth, 'B/s')} ({ceilings.source or 'ceilings'})"
        )
        compute_floor_ms = None
        if flops == 0:
            compute_util = 0.0
            delta_compute = 0.0
            compute_floor_ms = 0.0
            reasons.append("the workload model does no arithmetic (flops 0): no compute gap (0)")
        elif peak_dtype is None:
            reasons.append("compute gap unknown: no peak dtype given for the kernel's math")
        elif (_known(ceilings.flops_per_s.get(peak_dtype)) or 0) <= 0:
            known = ", ".join(sorted(ceilings.flops_per_s)) or "none"
            reasons.append(f"compute gap unknown: no {peak_dtype} peak in the ceilings (known: {known})")
        else:
            peak = float(ceilings.flops_per_s[peak_dtype])
            compute_util = achieved.flops_per_s / peak
            compute_floor_ms = flops / peak * 1e3
            reasons.append(
                f"compute utilisation {_pct(compute_util)}: {format_rate(achieved.flops_per_s, 'FLOP/s')} of the "
                f"{peak_dtype} peak {format_rate(peak, 'FLOP/s')}"
            )
        floor_ms = max(f for f in (compute_floor_ms, memory_floor_ms) if f is not None)
        tolerance = {"compute": BELOW_FLOOR_TOLERANCE,
                     "memory": BELOW_FLOOR_TOLERANCE + write_back_allowance(ceilings, bytes_min)}
        for axis, util in (("compute", compute_util), ("memory", memory_util)):
            if util is None:
                continue
            if util > 1.0:
                reasons.append(f"{axis} utilisation {_pct(util)} is above the ceiling: gap clamped to 0")
            if util > 1.0 + tolerance[axis]:
                below_floor = True
                reasons.append(
                    f"BELOW FLOOR: {duration:.6g} ms is faster than the roofline floor {floor_ms:.6g} ms "
                    f"({axis} more than {_pct(tolerance[axis])} over its ceiling): a measurement bug, a "
                    "cheat, or a ceiling measured too low; never report it as a win"
                )
        if compute_util is not None and delta_compute is None:
            delta_compute = 1.0 - _clamp01(compute_util)
        delta_memory = 1.0 - _clamp01(memory_util)
        label = LABEL_ROOFLINE
    else:
        label = LABEL_HEURISTIC
        sm = _known(metrics.get("sm_throughput_pct"))
        tensor = _known(metrics.get("tensor_pipe_utilization_pct"))
        if sm is not None:
            compute_pct = sm
            if tensor is not None and tensor > sm:
                compute_pct = tensor
                reasons.append(f"compute utilisation from tensor_pipe_utilization_pct {tensor:.1f}% (> SM)")
            else:
                reasons.append(f"compute utilisation from sm_throughput_pct {sm:.1f}%")
            compute_util = compute_pct / 100.0
            delta_compute = 1.0 - _clamp01(compute_util)
        else:
            reasons.append("compute gap unknown: sm_throughput_pct was not measured")
        mem = _known(metrics.get("memory_throughput_pct"))
        mem_key = "memory_throughput_pct"
        if mem is None:
            mem = _known(metrics.get("dram_throughput_pct"))
            mem_key = "dram_throughput_pct"
        if mem is not None:
            memory_util = mem / 100.0
            delta_memory = 1.0 - _clamp01(memory_util)
            reasons.append(f"memory utilisation from {mem_key} {mem:.1f}%")
        else:
            reasons.append(
                "memory gap unknown: neither memory_throughput_pct nor dram_throughput_pct was measured"
            )
    reasons.append(latency_reason)

    bound = _saturated_unit(metrics, reasons) or _bound(
        label=label,
        compute_util=compute_util,
        memory_util=memory_util,
        compute_floor=None if not use_roofline or compute_util is None else (flops / peak if peak else 0.0),
        memory_floor=None if not use_roofline else bytes_min / float(ceilings.bandwidth_bytes_per_s),
        delta_latency=delta_latency,
        reasons=reasons,
    )

    deltas = {"compute": delta_compute, "memory": delta_memory, "latency": delta_latency}
    budget, budget_reasons = axis_budget(deltas)
    reasons.extend(budget_reasons)

    near_peak, near_reason = _near_peak(deltas, label, below_floor)
    reasons.append(near_reason)

    return Roofline(
        delta_compute=delta_compute,
        delta_memory=delta_memory,
        delta_latency=delta_latency,
        bound=bound,
        near_peak=near_peak,
        axis_budget=budget,
        label=label,
        reasons=reasons,
        achieved=achieved,
        ceilings=ceilings if use_roofline else None,
        peak_dtype=peak_dtype,
        floor_ms=floor_ms,
        below_floor=below_floor,
        compute_utilization=compute_util,
        memory_utilization=memory_util,
        latency_metric=latency_metric,
        duration_ms=duration,
    )


def _bound(
    *,
    label: str,
    compute_util: float | None,
    memory_util: float | None,
    compute_floor: float | None,
    memory_floor: float | None,
    delta_latency: float | None,
    reasons: list[str],
) -> str:
    if compute_util is None and memory_util is None:
        reasons.append("bound unknown: neither the compute nor the memory gap is known")
        return "unknown"
    utils = [u for u in (compute_util, memory_util) if u is not None]
    if (
        delta_latency is not None
        and delta_latency >= LATENCY_BOUND_DELTA
        and all(u < LATENCY_BOUND_UTIL for u in utils)
    ):
        reasons.append(
            f"bound latency: compute and memory utilisation under {_pct(LATENCY_BOUND_UTIL)} while the "
            f"largest stall share is {_pct(delta_latency)}"
        )
        return "latency"
    if compute_util is None or memory_util is None:
        axis = "compute" if compute_util is not None else "memory"
        other = "memory" if axis == "compute" else "compute"
        reasons.append(f"bound {axis}: the only axis with a known utilisation ({other} unknown)")
        return axis
    if label == LABEL_ROOFLINE:
        axis = "compute" if compute_floor >= memory_floor else "memory"
        reasons.append(
            f"bound {axis}: compute floor {compute_floor * 1e3:.4g} ms vs memory floor "
            f"{memory_floor * 1e3:.4g} ms (the larger floor bounds; a tie counts as compute)"
        )
        return axis
    axis = "compute" if compute_util >= memory_util else "memory"
    reasons.append(
        f"bound {axis}: the higher speed-of-light utilisation (compute {_pct(compute_util)}, memory "
        f"{_pct(memory_util)}; a tie counts as compute)"
    )
    return axis


def _saturated_unit(metrics: Mapping[str, Any], reasons: list[str]) -> str | None:
    """The axis of a unit ncu saw saturated (speed of light >= SATURATED_PCT), if any: that unit bounds the
    kernel whatever the DRAM roofline says (a naive SGEMM is bound by L1 traffic that bytes_min cannot
    see). The busier of compute and memory wins."""
    sol = {"compute": _known(metrics.get("sm_throughput_pct")),
           "memory": _known(metrics.get("memory_throughput_pct"))}
    busy = {axis: value for axis, value in sol.items() if value is not None and value >= SATURATED_PCT}
    if not busy:
        return None
    axis = max(busy, key=lambda a: (busy[a], a == "compute"))
    reasons.append(f"bound {axis}: ncu measured the {axis} units at {busy[axis]:.1f}% of their peak "
                   f"(>= {SATURATED_PCT:g}%: saturated)")
    return axis


def _near_peak(deltas: Mapping[str, float | None], label: str, below_floor: bool) -> tuple[bool, str]:
    if label != LABEL_ROOFLINE:
        return False, "near_peak false: no workload roofline (a bottleneck-gap heuristic never claims it)"
    unknown = [axis for axis in AXES if deltas[axis] is None]
    if unknown:
        return False, "near_peak false: gap unknown for " + ", ".join(unknown)
    if below_floor:
        return False, "near_peak false: the measured time is below the roofline floor"
    high = [f"{axis} {deltas[axis]:.3f}" for axis in AXES if deltas[axis] >= NEAR_PEAK_DELTA]
    if high:
        return False, f"near_peak false: gap at or above {NEAR_PEAK_DELTA} for " + ", ".join(high)
    return True, f"near_peak true: all three gaps below {NEAR_PEAK_DELTA} on the workload roofline"


# ------------------------------------------------------------------------------------- top metrics


def _is_percent(unit: str) -> bool:
    return unit.strip() in {"%", "pct", "percent"}


def _short(ncu_name: str, key: str) -> str:
    name = ncu_name or key
    return name.split(".", 1)[0] if "__" in name else name


def _row_value(row: Mapping) -> float | None:
    if row.get("status") == "unknown":
        return None
    return _known(row.get("value"))


def _is_utilisation(row: Mapping) -> bool:
    """A compute or memory unit's throughput as a share of its peak ("...pct_of_peak..."): evidence of what
    bounds the kernel when it is high, whatever the registry says of low values. (On the latency axis a
    share of peak is occupancy: there high is good, and the registry's reading stands.)"""
    return "of_peak" in str(row.get("ncu_name") or "") and row.get("axis") in ("compute", "memory")


def _badness(value: float, unit: str, bad_when: str, utilisation: bool = False) -> float | None:
    if not _is_percent(unit):
        return None
    if utilisation:
        return _clamp01(value / 100.0)
    if bad_when == "high":
        return _clamp01(value / 100.0)
    if bad_when == "low":
        return _clamp01(1.0 - value / 100.0)
    return None


def _is_idle(value: float, unit: str, bad_when: str, utilisation: bool = False) -> bool:
    """A 'low is bad' percentage under IDLE_PCT: a unit the kernel does not use (the fp64 or tensor pipe
    of an fp32 SGEMM reads 0 and 0.008%). Its headroom is not a bottleneck: it ranks after the active
    units."""
    return _is_percent(unit) and (bad_when == "low" or utilisation) and value < IDLE_PCT


def _evidence(row: Mapping, value: float, badness: float | None) -> str:
    # a derived value names its inputs ("a.sum + b.sum"): the registry key reads better there
    derived_row = row.get("status") == "derived"
    name = str(row.get("key")) if derived_row else _short(str(row.get("ncu_name") or ""), str(row.get("key")))
    unit = str(row.get("unit") or "")
    bad_when = row.get("bad_when")
    derived = " (derived)" if derived_row else ""
    utilisation = _is_utilisation(row)
    if _is_idle(value, unit, bad_when, utilisation):
        return f"{name} {value:.2g}%: idle in this kernel: ranked after the active ones{derived}"
    if _is_percent(unit) and utilisation:
        state = "saturated: a bound of this kernel" if value >= SATURATED_PCT else f"{100.0 - value:.1f}% headroom"
        return f"{name} {value:.1f}% of peak: {state}{derived}"
    if _is_percent(unit) and bad_when == "low":
        return f"{name} {value:.1f}%: higher is better, badness {badness:.2f}{derived}"
    if _is_percent(unit) and bad_when == "high":
        return f"{name} {value:.1f}%: lower is better, badness {badness:.2f}{derived}"
    if _is_percent(unit):
        return f"{name} {value:.1f}% (neither high nor low is bad: unranked){derived}"
    shown = f"{value:.4g} {unit}".rstrip()
    return f"{name} = {shown} (not a percentage: ranked after the percentages){derived}"


def top_metrics(resolved: Iterable[Mapping], ncu_num: int) -> dict[str, list[TopMetric]]:
    """The ``ncu_num`` worst metrics per axis (compute, memory, latency; the info axis is left out).

    Each row: {key, value, unit, axis, bad_when (high|low|neither), ncu_name, status (measured|derived|
    unknown)}. Percentages rank by badness, ties by key: a unit's utilisation (``...pct_of_peak...``) by
    value/100, since the saturated units are what bounds the kernel; other percentages by value/100 when
    high is bad and 1 - value/100 when low is bad. Then idle units (under IDLE_PCT), then the other rows,
    by key.
    Unknown rows are never ranked (see ``unknown_keys``)."""
    ranked: dict[str, list[tuple[tuple, TopMetric]]] = {axis: [] for axis in AXES}
    for row in resolved:
        axis = row.get("axis")
        if axis not in ranked:
            continue
        value = _row_value(row)
        if value is None:
            continue
        unit = str(row.get("unit") or "")
        bad_when = str(row.get("bad_when") or "neither")
        utilisation = _is_utilisation(row)
        badness = _badness(value, unit, bad_when, utilisation)
        metric = TopMetric(
            key=str(row["key"]),
            ncu_name=str(row.get("ncu_name") or ""),
            value=value,
            unit=unit,
            badness=badness,
            evidence=_evidence(row, value, badness),
            bad_when=bad_when,
            status=str(row.get("status") or "measured"),
        )
        if badness is None:
            order = (2, 0.0, metric.key)
        elif _is_idle(value, unit, bad_when, utilisation):
            order = (1, 0.0, metric.key)
        else:
            order = (0, -badness, metric.key)
        ranked[axis].append((order, metric))
    count = max(0, int(ncu_num))
    return {axis: [m for _, m in sorted(rows, key=lambda r: r[0])[:count]] for axis, rows in ranked.items()}


def unknown_keys(resolved: Iterable[Mapping]) -> list[str]:
    """Registry keys of the ranked axes that ncu gave no value for (missing is unknown, never zero)."""
    return sorted({
        str(row["key"]) for row in resolved if row.get("axis") in AXES and _row_value(row) is None
    })


def metric_values(resolved: Iterable[Mapping]) -> dict[str, float | None]:
    """The {key: value or None} mapping ``compute_roofline`` takes, from resolved registry rows."""
    return {str(row["key"]): _row_value(row) for row in resolved}


def build_ncu_top(
    resolved: Iterable[Mapping],
    *,
    ncu_num: int,
    bundle: str,
    bundle_reason: str,
    duration_ms: float | None,
    kernels: int = 1,
) -> NcuTop:
    rows = list(resolved)
    return NcuTop(
        ncu_num=ncu_num,
        bundle=bundle,
        bundle_reason=bundle_reason,
        duration_ms=_known(duration_ms),
        axes=top_metrics(rows, ncu_num),
        unknown=unknown_keys(rows),
        kernels=kernels,
        values=metric_values(rows),
    )

"""Step 3b: roofline.json for one kernel: its compute and memory gaps, read off the workload roofline
(``kopt_core.roofline.model``) when the reference has a usable workload model, else off the
bottleneck-gap heuristic (``kopt_core.roofline.heuristic``); the latency gap; the bound; the axis budget
method selection spends; and whether an early stop (near_peak) is allowed.

The latency gap is the largest warp-stall share (percentage of stall cycles per reason) / 100 in both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from kopt_core.records.roofline import AXES, Bound, Ceilings, Roofline
from kopt_core.roofline.heuristic import bottleneck_gaps
from kopt_core.roofline.model import why_no_roofline, workload_roofline

# Re-exported: kopt_core.steps.profile imports the ncu_top builders from here, tests the heuristic's label.
from kopt_core.roofline.reading import (
    LABEL_HEURISTIC,  # noqa: F401
    LABEL_ROOFLINE,
    SATURATED_PCT,
    AxisReading,
    clamp01,
    known,
    pct,
)
from kopt_core.roofline.top import build_ncu_top, metric_values  # noqa: F401

BUDGET_TOTAL = 3
BUDGET_CAP = 2
NEAR_PEAK_DELTA = 0.15  # near_peak needs every gap below this
LATENCY_BOUND_UTIL = 0.5  # both utilisations under this ...
LATENCY_BOUND_DELTA = 0.5  # ... and a stall share at least this: latency-bound

STALL_PREFIX = "warp_stall_"
STALL_SUFFIX = "_pct"
# Reasons a warp is counted in that are not waiting on anything: "selected" is the warp that issued,
# "not_selected" was ready but another warp issued (plenty of parallelism, not a latency problem).
NOT_LATENCY_STALLS = frozenset({"warp_stall_selected_pct", "warp_stall_not_selected_pct"})

_Axis = Literal["compute", "memory"]  # the axes with a utilisation (and, on the roofline, a floor)


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
    duration = known(duration_ms)
    why_not = why_no_roofline(workload, duration, ceilings)
    if why_not is not None:
        reading = bottleneck_gaps(metrics, why_not)
    elif duration is None or ceilings is None:  # why_no_roofline gives a reason for either
        raise ValueError("why_no_roofline accepted a roofline without a duration or ceilings")
    else:
        reading = workload_roofline(workload, duration, ceilings, peak_dtype)
    delta_latency, latency_metric, latency_reason = latency_gap(metrics)
    reasons = [*reading.reasons, latency_reason]
    bound = _saturated_unit(metrics, reasons) or _bound(reading, delta_latency, reasons)
    deltas = {"compute": reading.delta_compute, "memory": reading.delta_memory, "latency": delta_latency}
    budget, budget_reasons = axis_budget(deltas)
    near_peak, near_reason = _near_peak(deltas, reading.label, reading.below_floor)
    return Roofline(
        delta_compute=reading.delta_compute,
        delta_memory=reading.delta_memory,
        delta_latency=delta_latency,
        bound=bound,
        near_peak=near_peak,
        axis_budget=budget,
        label=reading.label,
        reasons=[*reasons, *budget_reasons, near_reason],
        achieved=reading.achieved,
        ceilings=reading.ceilings,
        peak_dtype=peak_dtype,
        floor_ms=reading.floor_ms,
        below_floor=reading.below_floor,
        compute_utilization=reading.compute_util,
        memory_utilization=reading.memory_util,
        latency_metric=latency_metric,
        duration_ms=duration,
    )


def latency_gap(metrics: Mapping[str, Any]) -> tuple[float | None, str | None, str]:
    """(delta_latency, the stall key it came from, the reason in words)."""
    stalls = {
        key: known(value)
        for key, value in metrics.items()
        if key.startswith(STALL_PREFIX) and key.endswith(STALL_SUFFIX) and key not in NOT_LATENCY_STALLS
    }
    shares = {key: value for key, value in stalls.items() if value is not None}
    if not shares:
        return None, None, "latency gap unknown: no warp-stall share was measured"
    # the largest share; ties go to the key that sorts first, so the answer does not depend on order
    key = min(shares, key=lambda k: (-shares[k], k))
    delta = clamp01(shares[key] / 100.0)
    return delta, key, f"latency gap {delta:.3f} = largest warp-stall share {key} {shares[key]:.1f}% / 100"


# ------------------------------------------------------------------------------------------- the bound


def _saturated_unit(metrics: Mapping[str, Any], reasons: list[str]) -> _Axis | None:
    """The axis of a unit ncu saw saturated (speed of light >= SATURATED_PCT), if any: that unit bounds the
    kernel whatever the DRAM roofline says (a naive SGEMM is bound by L1 traffic that bytes_min cannot
    see). The busier of compute and memory wins."""
    sol: dict[_Axis, float | None] = {
        "compute": known(metrics.get("sm_throughput_pct")),
        "memory": known(metrics.get("memory_throughput_pct")),
    }
    busy = {axis: value for axis, value in sol.items() if value is not None and value >= SATURATED_PCT}
    if not busy:
        return None
    axis = max(busy, key=lambda a: (busy[a], a == "compute"))
    reasons.append(
        f"bound {axis}: ncu measured the {axis} units at {busy[axis]:.1f}% of their peak "
        f"(>= {SATURATED_PCT:g}%: saturated)"
    )
    return axis


def _bound(reading: AxisReading, delta_latency: float | None, reasons: list[str]) -> Bound:
    compute_util, memory_util = reading.compute_util, reading.memory_util
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
            f"bound latency: compute and memory utilisation under {pct(LATENCY_BOUND_UTIL)} while the "
            f"largest stall share is {pct(delta_latency)}"
        )
        return "latency"
    axis: _Axis
    if compute_util is None or memory_util is None:
        axis = "compute" if compute_util is not None else "memory"
        other = "memory" if axis == "compute" else "compute"
        reasons.append(f"bound {axis}: the only axis with a known utilisation ({other} unknown)")
        return axis
    if reading.label == LABEL_ROOFLINE:
        compute_floor, memory_floor = reading.compute_floor_s, reading.memory_floor_s
        if compute_floor is None or memory_floor is None:
            # model.workload_roofline sets each floor with its utilisation, and both are known here
            raise ValueError("a workload roofline reading with both utilisations but not both floors")
        axis = "compute" if compute_floor >= memory_floor else "memory"
        reasons.append(
            f"bound {axis}: compute floor {compute_floor * 1e3:.4g} ms vs memory floor "
            f"{memory_floor * 1e3:.4g} ms (the larger floor bounds; a tie counts as compute)"
        )
        return axis
    axis = "compute" if compute_util >= memory_util else "memory"
    reasons.append(
        f"bound {axis}: the higher speed-of-light utilisation (compute {pct(compute_util)}, memory "
        f"{pct(memory_util)}; a tie counts as compute)"
    )
    return axis


def _near_peak(deltas: Mapping[str, float | None], label: str, below_floor: bool) -> tuple[bool, str]:
    if label != LABEL_ROOFLINE:
        return False, "near_peak false: no workload roofline (a bottleneck-gap heuristic never claims it)"
    unknown = [axis for axis in AXES if deltas[axis] is None]
    if unknown:
        return False, "near_peak false: gap unknown for " + ", ".join(unknown)
    if below_floor:
        return False, "near_peak false: the measured time is below the roofline floor"
    # every delta is known here: the walrus only narrows the type
    high = [
        f"{axis} {delta:.3f}"
        for axis in AXES
        if (delta := deltas[axis]) is not None and delta >= NEAR_PEAK_DELTA
    ]
    if high:
        return False, f"near_peak false: gap at or above {NEAR_PEAK_DELTA} for " + ", ".join(high)
    return True, f"near_peak true: all three gaps below {NEAR_PEAK_DELTA} on the workload roofline"


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
    """Slots proportional to the known gaps, rounded by largest remainder so that they sum to ``total``, at
    most ``cap`` per axis (what a cap removes goes to the other known axes by the same rule, never above
    the cap). Unknown gaps and gaps of 0 get nothing. Returns (budget, reasons)."""
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

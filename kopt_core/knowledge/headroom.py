"""Headroom: how much of a kernel's time the evidence says a method can unlock, and the axis budget
re-weighed by the kernel's distance from its floor.

A method's ``headroom`` terms (method_registry.json) each read one evidence key: a warp-stall share the
method removes, an efficiency below its ideal, a traffic ratio over the minimum, the share of SMs a small
grid leaves idle, a dtype-versus-pipe mismatch, the share of a short launch that is launch latency. The
method's headroom is its largest known term, in [0, 1]; a method whose terms are all unknown has no
headroom figure and ranks after those that have one. The scan ranks the triggered methods of an axis by
headroom, priority breaking ties (``rank_key``), so the budget goes to what the evidence says pays most.

``rebudget``: the seed's bottleneck-gap heuristic measures each axis's gap as the unit's distance from
its peak, so a unit saturated by wasted work (shared-memory bank conflicts, scalar 2-byte accesses,
integer index arithmetic) shows no gap at all and gets no budget, however far the kernel runs above its
floor. When the kernel has a floor (kopt's default workload model gives every kernel a memory floor) the
axis that bounds the kernel owns the time above that floor: its gap is raised to ``1 - floor_share``
and the budget is allocated again with the seed's rule (proportional to the gaps, cap 2, total 3). A
workload roofline's gaps are already measured from the floors and are left as they are.
"""

from __future__ import annotations

from collections.abc import Mapping

from kopt_core.knowledge.methods import HeadroomTerm, Method
from kopt_core.records.roofline import Roofline
from kopt_core.roofline.gaps import axis_budget

LAUNCH_LATENCY_MS = 0.004  # what one more launch costs on the host and GPU (MEASUREMENT.md: 2-5 us)
HEADROOM_DIGITS = 2  # headrooms equal to two decimals tie, and priority decides


def term_value(term: HeadroomTerm, value: float | None) -> float | None:
    """One term's reading of ``value`` (None when the value is unknown), clamped to [0, 1]."""
    return None if value is None else _reading(term, value)


def _reading(term: HeadroomTerm, value: float) -> float:
    of = term.of if term.of is not None else (1.0 if term.as_ in ("inverse", "launch") else 100.0)
    if term.as_ == "share":
        raw = value / of
    elif term.as_ == "complement":
        raw = 1.0 - value / of
    elif term.as_ == "inverse":  # below the ideal (or at 0) nothing was done again
        raw = 1.0 - of / value if value > 0 else 0.0
    elif term.as_ == "idle":
        raw = 1.0 - value
    elif term.as_ == "flag":
        raw = 1.0 if value >= 1.0 else 0.0
    elif term.as_ == "launch":  # value in ms, or in 1/of ms (of = 1000 for microseconds)
        ms = value / of
        raw = LAUNCH_LATENCY_MS / (ms + LAUNCH_LATENCY_MS) if ms >= 0 else 0.0
    else:  # the registry's schema allows only the readings above
        raise ValueError(f"unknown headroom reading {term.as_!r}")
    return min(1.0, max(0.0, raw * term.scale))


def headroom(method: Method, values: Mapping[str, float | None]) -> tuple[float | None, str]:
    """(headroom, why): the largest known term of ``method`` on ``values``, and the words for it; (None,
    why) when the method has no term or none is known."""
    if not method.headroom:
        return None, "no headroom terms in the registry"
    best: tuple[float, HeadroomTerm, float] | None = None
    for term in method.headroom:
        value = values.get(term.metric)
        if value is None:
            continue
        reading = _reading(term, value)
        if best is None or reading > best[0]:
            best = (reading, term, value)
    if best is None:
        names = ", ".join(dict.fromkeys(t.metric for t in method.headroom))
        return None, f"headroom unknown: {names} not measured"
    reading, term, value = best
    return round(reading, HEADROOM_DIGITS), f"headroom {reading:.2f} from {term.describe(value)}"


def rank_key(method: Method, values: Mapping[str, float | None]) -> tuple[int, float, int]:
    """Sort key of a triggered method within its axis: known headroom first, larger first, then the
    registry's priority."""
    room, _ = headroom(method, values)
    return (0 if room is not None else 1, -(room or 0.0), method.priority)


def rebudget(roofline: Roofline, floor_share: float | None) -> tuple[dict, str]:
    """(budget, why): roofline.json's axis budget, re-allocated when a bottleneck-gap heuristic left the
    bounding axis a smaller gap than the kernel's distance from its floor (module docstring); why is
    empty when the budget stands as roofline.json gives it."""
    budget = dict(roofline.axis_budget)
    bound = roofline.bound
    if roofline.label == "roofline" or floor_share is None or bound not in ("compute", "memory"):
        return budget, ""
    above_floor = max(0.0, 1.0 - floor_share)
    deltas = {
        "compute": roofline.delta_compute,
        "memory": roofline.delta_memory,
        "latency": roofline.delta_latency,
    }
    current = deltas[bound]
    if current is not None and current >= above_floor:
        return budget, ""
    deltas[bound] = above_floor
    new_budget, _ = axis_budget(deltas)
    if new_budget == budget:
        return budget, ""
    shown = "unknown" if current is None else f"{current:.2f}"
    return new_budget, (
        f"the kernel is {bound}-bound and runs at {floor_share:.0%} of its floor, so the {bound} axis owns "
        f"the {above_floor:.0%} of its time above the floor: its gap {shown} (from ncu's utilisation, "
        f"which counts wasted work as use) was raised to {above_floor:.2f} and the budget re-allocated "
        f"by the seed's rule: {', '.join(f'{a} {n}' for a, n in new_budget.items())} "
        f"(roofline.json: {', '.join(f'{a} {n}' for a, n in budget.items())})"
    )

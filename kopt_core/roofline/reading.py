"""What the two ways of reading a kernel's compute and memory utilisation both give (``AxisReading``):
the workload roofline (``kopt_core.roofline.model``) and the bottleneck-gap heuristic
(``kopt_core.roofline.heuristic``); and the number helpers every roofline module shares."""

from __future__ import annotations

import math
from typing import Any, Final

from attrs import field, frozen

from kopt_core.records.fields import as_tuple
from kopt_core.records.roofline import Achieved, Ceilings, Label

# Final: their types are the Literal values roofline.json's ``label`` takes (``records.Label``)
LABEL_ROOFLINE: Final = "roofline"
LABEL_HEURISTIC: Final = "bottleneck-gap heuristic"

SATURATED_PCT = 80.0  # a unit this busy is a bound of the kernel (ncu's speed-of-light reading)


@frozen
class AxisReading:
    """The compute and memory utilisations (fractions: 1.0 = at the ceiling; None = unknown) and gaps,
    with the reasons in the order roofline.json lists them. Achieved rates, ceilings, floors and the
    below-floor verdict exist on the workload roofline only."""

    label: Label
    compute_util: float | None
    memory_util: float | None
    delta_compute: float | None
    delta_memory: float | None
    reasons: tuple[str, ...] = field(converter=as_tuple)
    achieved: Achieved | None = None
    ceilings: Ceilings | None = None
    # seconds, compared exactly to decide the bound; floor_ms is the larger of them as roofline.json shows it
    compute_floor_s: float | None = None
    memory_floor_s: float | None = None
    floor_ms: float | None = None
    below_floor: bool = False


def known(value: Any) -> float | None:
    """A number, or None when unknown (None, NaN, not a number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def pct(fraction: float) -> str:
    return f"{100.0 * fraction:.1f}%"


def format_rate(value: float, unit: str) -> str:
    """A rate with an SI prefix: format_rate(4.28e12, "B/s") == "4.28 TB/s"."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"

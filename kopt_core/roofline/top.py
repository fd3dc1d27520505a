"""Step 3b: the top ncu metrics per axis (ncu_top.json), ranked by how bad each reading is, each with the
sentence that makes it evidence."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kopt_core.records.roofline import AXES, NcuTop, TopMetric
from kopt_core.roofline.reading import SATURATED_PCT, clamp01, known

IDLE_PCT = 0.1  # a 'low is bad' percentage below this is an idle unit, not a bottleneck


def _is_percent(unit: str) -> bool:
    return unit.strip() in {"%", "pct", "percent"}


def _short(ncu_name: str, key: str) -> str:
    name = ncu_name or key
    return name.split(".", 1)[0] if "__" in name else name


def _row_value(row: Mapping) -> float | None:
    if row.get("status") == "unknown":
        return None
    return known(row.get("value"))


def _is_utilisation(row: Mapping) -> bool:
    """A compute or memory unit's throughput as a share of its peak ("...pct_of_peak..."): evidence of what
    bounds the kernel when it is high, whatever the registry says of low values. (On the latency axis a
    share of peak is occupancy: there high is good, and the registry's reading stands.)"""
    return "of_peak" in str(row.get("ncu_name") or "") and row.get("axis") in ("compute", "memory")


def _badness(value: float, unit: str, bad_when: str, utilisation: bool = False) -> float | None:
    if not _is_percent(unit):
        return None
    if utilisation:
        return clamp01(value / 100.0)
    if bad_when == "high":
        return clamp01(value / 100.0)
    if bad_when == "low":
        return clamp01(1.0 - value / 100.0)
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
    bad_when = str(row.get("bad_when") or "neither")  # as _ranked reads it
    derived = " (derived)" if derived_row else ""
    utilisation = _is_utilisation(row)
    if _is_idle(value, unit, bad_when, utilisation):
        return f"{name} {value:.2g}%: idle in this kernel: ranked after the active ones{derived}"
    if _is_percent(unit) and utilisation:
        state = (
            "saturated: a bound of this kernel"
            if value >= SATURATED_PCT
            else f"{100.0 - value:.1f}% headroom"
        )
        return f"{name} {value:.1f}% of peak: {state}{derived}"
    if _is_percent(unit) and bad_when == "low":
        return f"{name} {value:.1f}%: higher is better, badness {badness:.2f}{derived}"
    if _is_percent(unit) and bad_when == "high":
        return f"{name} {value:.1f}%: lower is better, badness {badness:.2f}{derived}"
    if _is_percent(unit):
        return f"{name} {value:.1f}% (neither high nor low is bad: unranked){derived}"
    shown = f"{value:.4g} {unit}".rstrip()
    return f"{name} = {shown} (not a percentage: ranked after the percentages){derived}"


def _ranked(row: Mapping, value: float) -> tuple[tuple, TopMetric]:
    """(sort key, metric) for one known row: ranked percentages first, worst first; then idle units; then
    the rest; ties by key."""
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
        return (2, 0.0, metric.key), metric
    if _is_idle(value, unit, bad_when, utilisation):
        return (1, 0.0, metric.key), metric
    return (0, -badness, metric.key), metric


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
        value = _row_value(row)
        if axis in ranked and value is not None:
            ranked[axis].append(_ranked(row, value))
    count = max(0, int(ncu_num))
    return {axis: [m for _, m in sorted(rows, key=lambda r: r[0])[:count]] for axis, rows in ranked.items()}


def unknown_keys(resolved: Iterable[Mapping]) -> list[str]:
    """Registry keys of the ranked axes that ncu gave no value for (missing is unknown, never zero)."""
    return sorted(
        {str(row["key"]) for row in resolved if row.get("axis") in AXES and _row_value(row) is None}
    )


def metric_values(resolved: Iterable[Mapping]) -> dict[str, float | None]:
    """The {key: value or None} mapping ``compute_roofline`` takes and method selection evaluates
    triggers on, from resolved registry rows."""
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
        duration_ms=known(duration_ms),
        axes=top_metrics(rows, ncu_num),
        unknown=unknown_keys(rows),
        kernels=kernels,
        values=metric_values(rows),
    )

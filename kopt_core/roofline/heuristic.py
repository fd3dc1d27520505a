"""The bottleneck-gap heuristic, for a kernel without a usable workload model: ncu's speed-of-light
percentages stand in for the utilisations. It has no floor, so it never allows near_peak."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopt_core.roofline.reading import LABEL_HEURISTIC, AxisReading, clamp01, known


def bottleneck_gaps(metrics: Mapping[str, Any], why: str) -> AxisReading:
    """The utilisations from ``metrics`` (canonical registry keys); ``why`` says why there is no workload
    roofline and comes first among the reasons."""
    compute_util, compute_reason = _compute(metrics)
    memory_util, memory_reason = _memory(metrics)
    return AxisReading(
        label=LABEL_HEURISTIC,
        compute_util=compute_util,
        memory_util=memory_util,
        delta_compute=_gap(compute_util),
        delta_memory=_gap(memory_util),
        reasons=(why, compute_reason, memory_reason),
    )


def _gap(util: float | None) -> float | None:
    return None if util is None else 1.0 - clamp01(util)


def _compute(metrics: Mapping[str, Any]) -> tuple[float | None, str]:
    """The SM's throughput, or the tensor pipe's utilisation when that is the higher."""
    sm = known(metrics.get("sm_throughput_pct"))
    if sm is None:
        return None, "compute gap unknown: sm_throughput_pct was not measured"
    tensor = known(metrics.get("tensor_pipe_utilization_pct"))
    if tensor is not None and tensor > sm:
        return tensor / 100.0, f"compute utilisation from tensor_pipe_utilization_pct {tensor:.1f}% (> SM)"
    return sm / 100.0, f"compute utilisation from sm_throughput_pct {sm:.1f}%"


def _memory(metrics: Mapping[str, Any]) -> tuple[float | None, str]:
    for key in ("memory_throughput_pct", "dram_throughput_pct"):
        value = known(metrics.get(key))
        if value is not None:
            return value / 100.0, f"memory utilisation from {key} {value:.1f}%"
    return None, "memory gap unknown: neither memory_throughput_pct nor dram_throughput_pct was measured"

"""Evidence kopt derives from a profile and its roofline together, beside the metric registry's keys.

``ROOFLINE_EVIDENCE`` names the keys a method trigger may use besides the metric registry's;
``roofline_evidence`` computes them, and ``floor_share`` says how close a kernel runs to its roofline
floor. All are unknown (None) without a workload model.
"""

from __future__ import annotations

from kopt_core.roofline.records import Roofline

ROOFLINE_EVIDENCE = {
    "dram_excess_ratio": "ncu's DRAM bytes over the workload model's bytes_min: how many times the kernel's "
    "minimum traffic went through DRAM (1.0 = every byte once)",
}


def roofline_evidence(roofline: Roofline, values: dict) -> dict:
    """The ``ROOFLINE_EVIDENCE`` values for one profile (``values``: its metric values by registry key)."""
    dram = values.get("dram_bytes")
    achieved = roofline.achieved
    bytes_min = achieved.bytes_per_s * achieved.duration_ms / 1e3 if achieved is not None else None
    return {"dram_excess_ratio": dram / bytes_min if dram is not None and bytes_min else None}


def floor_share(roofline: Roofline) -> float | None:
    """How close the kernel runs to its roofline floor (floor_ms / duration_ms; 1.0 = at the floor), or
    None without a real roofline (no workload model: the bottleneck-gap heuristic)."""
    if roofline.label != "roofline" or not roofline.floor_ms or not roofline.duration_ms:
        return None
    return roofline.floor_ms / roofline.duration_ms

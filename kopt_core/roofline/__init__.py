"""Step 3b: device ceilings, roofline gaps, the evidence-driven axis budget and the top ncu metrics.

``compute_roofline`` (``gaps``: the workload roofline of ``model`` or the heuristic of ``heuristic``) ->
``Roofline`` (roofline.json), ``build_ncu_top`` / ``top_metrics`` (``top``) -> ``NcuTop`` (ncu_top.json),
``measure_ceilings`` -> ``Ceilings``, ``plot_roofline`` -> PNG (``kopt_core.roofline.plot``, imported on
use: it needs matplotlib). The records (``Ceilings``, ``Roofline``, ``NcuTop``, ``DEFAULT_CEILINGS``) are
``kopt_core.records.roofline``.
"""

from kopt_core.roofline.gaps import axis_budget, compute_roofline, latency_gap
from kopt_core.roofline.top import build_ncu_top, metric_values, top_metrics, unknown_keys


def __getattr__(name: str):
    # kopt_core.roofline.ceilings is loaded on first use, so ``python -m kopt_core.roofline.ceilings``
    # runs it as __main__ without a second copy already in sys.modules
    if name == "measure_ceilings":
        from kopt_core.roofline import ceilings

        return getattr(ceilings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "axis_budget",
    "build_ncu_top",
    "compute_roofline",
    "latency_gap",
    "measure_ceilings",
    "metric_values",
    "top_metrics",
    "unknown_keys",
]

"""A picture of roofline.json: the roofline with the kernel on it, or, for the bottleneck-gap heuristic
(no workload model), a bar chart of the three gaps. matplotlib is imported inside the function and
each figure gets its own Agg canvas: no pyplot, no global backend switch."""

from __future__ import annotations

from pathlib import Path

from kopt_core.roofline.reading import format_rate
from kopt_core.roofline.records import AXES, Achieved, Ceilings, Roofline


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # A Figure on its own Agg canvas, without pyplot: no global backend switch, no GUI, nothing left open.
    fig = Figure(figsize=(8, 5.5), dpi=120)
    FigureCanvasAgg(fig)
    return fig


def _roofline_parts(roofline: Roofline) -> tuple[Achieved, Ceilings, float] | None:
    """(achieved, ceilings, arithmetic intensity) when the roofline can be drawn, else None."""
    a, c = roofline.achieved, roofline.ceilings
    if (
        roofline.label == "roofline"
        and a is not None
        and c is not None
        and a.arithmetic_intensity is not None
        and a.arithmetic_intensity > 0
        and a.flops_per_s > 0
        and c.bandwidth_bytes_per_s > 0
    ):
        return a, c, a.arithmetic_intensity
    return None


def plot_roofline(roofline: Roofline, path) -> Path:
    """Write a PNG of ``roofline`` to ``path`` and return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig = _figure()
    parts = _roofline_parts(roofline)
    if parts is not None:
        _draw_roofline(fig, roofline, *parts)
    else:
        _draw_gaps(fig, roofline)
    fig.tight_layout()
    fig.savefig(target, format="png")
    return target


def _draw_roofline(fig, r: Roofline, a: Achieved, c: Ceilings, intensity: float) -> None:
    ax = fig.add_subplot(1, 1, 1)
    bandwidth = c.bandwidth_bytes_per_s
    peak = c.flops_per_s.get(r.peak_dtype) if r.peak_dtype else None
    ridge = peak / bandwidth if peak else None

    anchors = [intensity] + ([ridge] if ridge else [])
    x_lo, x_hi = min(anchors) / 30.0, max(anchors) * 30.0
    xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]

    ax.plot(xs, [bandwidth * x for x in xs], color="tab:blue", lw=1, ls=":", alpha=0.6)
    if peak:
        ax.axhline(peak, color="tab:red", lw=1, ls=":", alpha=0.6)
        roof = [min(peak, bandwidth * x) for x in xs]
        ax.plot(xs, roof, color="black", lw=2.2, label="attainable")
        ax.plot(
            [],
            [],
            color="tab:red",
            ls=":",
            label=f"compute roof: {r.peak_dtype} {format_rate(peak, 'FLOP/s')}",
        )
        ax.plot(
            [ridge],
            [peak],
            marker="D",
            color="gray",
            ms=7,
            ls="none",
            label=f"ridge point: {ridge:.3g} FLOP/byte",
        )
    else:
        ax.plot(xs, [bandwidth * x for x in xs], color="black", lw=2.2, label="attainable (memory only)")
    ax.plot([], [], color="tab:blue", ls=":", label=f"memory roof: {format_rate(bandwidth, 'B/s')}")

    parts = []
    if r.compute_utilization is not None:
        parts.append(f"{100 * r.compute_utilization:.1f}% of compute peak")
    if r.memory_utilization is not None:
        parts.append(f"{100 * r.memory_utilization:.1f}% of bandwidth")
    colour = "tab:red" if r.below_floor else "tab:green"
    ax.plot(
        [intensity],
        [a.flops_per_s],
        marker="o",
        ms=10,
        color=colour,
        ls="none",
        label=f"kernel: {format_rate(a.flops_per_s, 'FLOP/s')}, {a.duration_ms:.4g} ms",
    )
    note = "\n".join(parts)
    if r.below_floor:
        note += "\nBELOW THE ROOFLINE FLOOR:\nmeasurement bug or cheat"
    ax.annotate(
        note,
        xy=(intensity, a.flops_per_s),
        xytext=(12, -14),
        textcoords="offset points",
        fontsize=9,
        va="top",
        color=colour if r.below_floor else "black",
        bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": colour, "alpha": 0.9},
    )

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ys = [a.flops_per_s, bandwidth * x_lo] + ([peak] if peak else [bandwidth * x_hi])
    ax.set_ylim(min(ys) / 5.0, max(ys) * 3.0)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    ax.set_title(
        f"roofline: {c.device}, bound {r.bound}"
        f"{', near peak' if r.near_peak else ''}\n"
        f"budget " + ", ".join(f"{k} {r.axis_budget.get(k, 0)}" for k in AXES) + f"   ({c.source})",
        fontsize=10,
    )


def _draw_gaps(fig, r: Roofline) -> None:
    ax = fig.add_subplot(1, 1, 1)
    deltas = {"compute": r.delta_compute, "memory": r.delta_memory, "latency": r.delta_latency}
    colours = {"compute": "tab:red", "memory": "tab:blue", "latency": "tab:orange"}
    for i, axis in enumerate(AXES):
        delta = deltas[axis]
        budget = r.axis_budget.get(axis, 0)
        if delta is None:
            ax.bar(i, 1.0, color="none", edgecolor="gray", hatch="//", lw=1)
            ax.text(i, 0.5, "unknown", ha="center", va="center", fontsize=10, color="gray")
        else:
            ax.bar(i, delta, color=colours[axis], alpha=0.8)
            ax.text(i, delta + 0.02, f"{delta:.2f}", ha="center", va="bottom", fontsize=10)
        ax.text(i, -0.08, f"budget {budget}", ha="center", va="top", fontsize=9)
    ax.axhline(0.15, color="gray", ls="--", lw=1)
    ax.text(-0.45, 0.16, "near-peak threshold 0.15", ha="left", va="bottom", fontsize=8, color="gray")
    ax.set_xticks(range(len(AXES)))
    ax.set_xticklabels([f"Δ {axis}" for axis in AXES])
    ax.tick_params(axis="x", pad=18)
    ax.set_ylim(-0.15, 1.12)
    ax.set_ylabel("gap (1 - utilisation)")
    ax.grid(True, axis="y", alpha=0.3)
    if r.label == "roofline":
        title = "roofline (gaps only: no arithmetic intensity to place on the roof)"
    else:
        title = "bottleneck-gap heuristic (no workload model)"
    ax.set_title(
        f"{title}\nbound {r.bound}; near_peak is never claimed from a heuristic"
        if r.label != "roofline"
        else f"{title}\nbound {r.bound}",
        fontsize=10,
    )

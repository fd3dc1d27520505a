"""Pictures of the roofline. matplotlib is imported inside the functions and each figure gets its own Agg
canvas: no pyplot, no global backend switch, nothing left open.

- ``roofline_chart(ceilings, points, path)``: the real roofline, log-log, arithmetic intensity (FLOP/byte)
  against achieved FLOP/s, with the device's measured roofs and the baseline and each champion on it,
  joined in order. ``roofline_geometry`` computes what it draws (roofs, ridge points, axis limits, which
  points were placed, left out or found above a roof) without matplotlib, so it can be checked.
- ``plot_roofline(roofline, path)``: roofline.png of one profile. With a workload model (roofline.json's
  achieved rates and ceilings) it is ``roofline_chart`` with the one kernel on it; without one (the
  bottleneck-gap heuristic) a bar chart of the three gaps.

Both write 1600 x 1000 px (the gap chart 960 x 660) in the Okabe-Ito colour-blind-safe palette, where
shape and line style also tell each element apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from attrs import field, frozen
from attrs.validators import in_

from kopt_core.records.roofline import AXES, Ceilings, Roofline
from kopt_core.roofline.model import BELOW_FLOOR_TOLERANCE, workload_field, write_back_allowance
from kopt_core.roofline.reading import format_rate, known

PointKind = Literal["baseline", "champion", "kernel"]
PointView = Literal["roofline", "memory", "left out"]

# Okabe & Ito's palette (colour-blind safe)
PALETTE = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "grey": "#999999",
}
MEMORY_COLOUR = PALETTE["blue"]
ROOF_COLOURS = ("green", "orange", "sky", "grey", "black", "yellow")  # compute roofs, lowest first
KIND_STYLE = {  # (marker, colour) of a point of each kind
    "baseline": ("s", PALETTE["black"]),
    "champion": ("o", PALETTE["vermillion"]),
    "kernel": ("^", PALETTE["blue"]),
}
ABOVE_ROOF_STYLE = ("X", PALETTE["purple"])
ABOVE_ROOF_NOTE = "above the roof: measurement or model error"
CHART_SIZE = (16.0, 10.0)  # inches at CHART_DPI: 1600 x 1000 px
CHART_DPI = 100
MARGIN_DECADES = 1.0  # the x axis reaches a decade beyond the lowest and highest intensity or ridge
HEADROOM_DECADES = 0.5  # the y axis reaches half a decade above the highest roof or point

# What each ceilings key is called on the chart (a key not listed is shown as it is)
DTYPE_NAMES = {
    "float32": "float32 (FMA)",
    "tf32": "tf32 tensor",
    "float16": "float16 tensor",
    "bfloat16": "bfloat16 tensor",
    "float8_e4m3fn": "fp8 e4m3 tensor",
    "float64": "float64",
    "int8": "int8 tensor",
}


@frozen
class RooflinePoint:
    """One kernel to place on the roofline: its workload model's arithmetic intensity (FLOP per byte of
    bytes_min) and the FLOP/s its measured time reaches. None (or NaN) where unknown: such a point is left
    out and the chart says so.

    ``kind``: "baseline" | "champion" | "kernel"; the baseline and the champions are joined in the order
    given. Keyword-only extras: ``bytes_per_s`` (achieved; derived as flops_per_s / intensity when not
    given, and required for a kernel with flops == 0), ``peak_dtype`` (the ceilings key its math runs at:
    the roof it is judged against; the highest roof when None), ``bytes_min`` (for the L2 write-back
    allowance ``model.write_back_allowance``) and ``below_floor`` (the roofline model already judged its
    time faster than the roofline floor: always drawn as above the roof)."""

    label: str
    intensity: float | None
    flops_per_s: float | None
    kind: PointKind = field(validator=in_(("baseline", "champion", "kernel")))
    bytes_per_s: float | None = field(default=None, kw_only=True)
    peak_dtype: str | None = field(default=None, kw_only=True)
    bytes_min: float | None = field(default=None, kw_only=True)
    below_floor: bool = field(default=False, kw_only=True)

    @classmethod
    def from_workload(
        cls,
        label: str,
        workload: Mapping | Any | None,
        kind: PointKind,
        *,
        duration_ms: float | None = None,
        peak_dtype: str | None = None,
    ) -> RooflinePoint:
        """A point from a workload model: bench.json's ``Workload`` (flops, bytes_min and its achieved
        tflops / tbytes_per_s) or a reference's workload_model mapping. ``duration_ms`` (the kernel's
        median) gives the rates when given; else the workload's achieved ones are used. Unknown parts
        give a point that is left out."""
        flops = workload_field(workload, "flops")
        bytes_min = workload_field(workload, "bytes_min")
        if flops is None or bytes_min is None or flops < 0 or bytes_min <= 0:
            return cls(label, None, None, kind, peak_dtype=peak_dtype)
        if duration_ms is not None and duration_ms > 0:
            seconds = duration_ms / 1e3
            flops_per_s: float | None = flops / seconds
            bytes_per_s: float | None = bytes_min / seconds
        else:
            tflops = workload_field(workload, "tflops")
            tbytes = workload_field(workload, "tbytes_per_s")
            flops_per_s = None if tflops is None else tflops * 1e12
            bytes_per_s = None if tbytes is None else tbytes * 1e12
        return cls(
            label,
            flops / bytes_min,
            flops_per_s,
            kind,
            bytes_per_s=bytes_per_s,
            peak_dtype=peak_dtype,
            bytes_min=bytes_min,
        )

    @classmethod
    def from_roofline(
        cls, roofline: Roofline, label: str = "kernel", kind: PointKind = "kernel"
    ) -> RooflinePoint:
        """A point from roofline.json (``Roofline``): its achieved rates, peak dtype and below_floor."""
        a = roofline.achieved
        if a is None:
            return cls(label, None, None, kind, peak_dtype=roofline.peak_dtype)
        bytes_min = a.bytes_per_s * a.duration_ms / 1e3 if a.duration_ms else None
        return cls(
            label,
            a.arithmetic_intensity,
            a.flops_per_s,
            kind,
            bytes_per_s=a.bytes_per_s,
            peak_dtype=roofline.peak_dtype,
            bytes_min=bytes_min,
            below_floor=roofline.below_floor,
        )


@frozen
class Roof:
    """One compute roof: a ceilings key, the name the chart gives it, its FLOP/s and its ridge point
    (the arithmetic intensity where the memory roof reaches it: flops_per_s / bandwidth)."""

    dtype: str
    name: str
    flops_per_s: float
    ridge: float


@frozen
class PlacedPoint:
    """Where one ``RooflinePoint`` went and why: ``view`` "roofline" (on the FLOP/s roofline), "memory"
    (flops == 0: on the memory-bound view) or "left out"; its utilisations of the roof it is judged
    against and of the bandwidth; ``above_roof`` when either is beyond the roof plus the tolerance."""

    index: int
    label: str
    kind: str
    view: PointView
    intensity: float | None = None
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    roof: Roof | None = None
    compute_util: float | None = None
    memory_util: float | None = None
    above_roof: bool = False
    reason: str = ""  # why it was left out, found above the roof, or how far over a roof it is allowed


@frozen
class RooflineGeometry:
    """What ``roofline_chart`` draws. ``xlim``/``ylim`` are the FLOP/s roofline's axes (None when no
    point is on it and there are memory-bound points to show instead), ``memory_xlim`` the bytes/s axis
    of the memory-bound view (None without one), ``path`` the labels joined in order (baseline and
    champions on the roofline), ``notes`` the footnotes."""

    device: str
    bandwidth: float
    roofs: tuple[Roof, ...]
    points: tuple[PlacedPoint, ...]
    xlim: tuple[float, float] | None
    ylim: tuple[float, float] | None
    memory_xlim: tuple[float, float] | None
    path: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ridges(self) -> dict[str, float]:
        return {roof.dtype: roof.ridge for roof in self.roofs}

    def _labels(self, keep) -> tuple[str, ...]:
        return tuple(p.label for p in self.points if keep(p))

    @property
    def placed(self) -> tuple[str, ...]:
        return self._labels(lambda p: p.view == "roofline")

    @property
    def memory_only(self) -> tuple[str, ...]:
        return self._labels(lambda p: p.view == "memory")

    @property
    def left_out(self) -> tuple[str, ...]:
        return self._labels(lambda p: p.view == "left out")

    @property
    def above_roof(self) -> tuple[str, ...]:
        return self._labels(lambda p: p.above_roof)


def _positive(value: float | None) -> float | None:
    number = known(value)
    return number if number is not None and number > 0 else None


def _roofs(ceilings: Ceilings) -> tuple[Roof, ...]:
    bandwidth = _positive(ceilings.bandwidth_bytes_per_s)
    if bandwidth is None:
        raise ValueError(f"ceilings of {ceilings.device or 'the device'} have no bandwidth: no roofline")
    roofs = []
    for dtype, rate in ceilings.flops_per_s.items():
        peak = _positive(rate)
        if peak is not None:
            roofs.append(Roof(dtype, DTYPE_NAMES.get(dtype, dtype), peak, peak / bandwidth))
    return tuple(sorted(roofs, key=lambda roof: (roof.flops_per_s, roof.dtype)))


def _place(
    index: int, point: RooflinePoint, ceilings: Ceilings, roofs: Sequence[Roof], tolerance: float
) -> PlacedPoint:
    base: dict[str, Any] = {"index": index, "label": point.label, "kind": point.kind}
    intensity, flops = known(point.intensity), known(point.flops_per_s)
    bytes_per_s = _positive(point.bytes_per_s)
    if flops is not None and flops > 0 and intensity is not None and intensity > 0:
        view: PointView = "roofline"
        bytes_per_s = bytes_per_s or flops / intensity
    elif flops == 0 and intensity is not None and intensity >= 0 and bytes_per_s is not None:
        view = "memory"  # a model without arithmetic: no FLOP/s to place, only its bandwidth
    else:
        if intensity is None or flops is None:
            why = "no workload model (flops or bytes unknown)"
        elif flops == 0:
            why = "flops 0 and no achieved bytes/s"
        else:
            why = f"not placeable (intensity {intensity:.3g}, {flops:.3g} FLOP/s)"
        return PlacedPoint(**base, view="left out", reason=why)

    bandwidth = float(ceilings.bandwidth_bytes_per_s)
    by_dtype = {roof.dtype: roof for roof in roofs}
    roof = by_dtype.get(point.peak_dtype or "") or (roofs[-1] if roofs else None)
    compute_util = flops / roof.flops_per_s if roof is not None and view == "roofline" else None
    memory_util = bytes_per_s / bandwidth
    memory_slack = tolerance + write_back_allowance(ceilings, point.bytes_min or 0.0)
    reasons = []
    if compute_util is not None and roof is not None and compute_util > 1.0 + tolerance:
        reasons.append(f"FLOP/s {100 * compute_util:.0f}% of the {roof.dtype} roof")
    if memory_util > 1.0 + memory_slack:
        reasons.append(f"bandwidth {100 * memory_util:.0f}% of the memory roof")
    if point.below_floor and not reasons:
        reasons.append("faster than the roofline floor (roofline.json below_floor)")
    above_roof = bool(reasons)
    if not above_roof:  # over a roof, but by less than the tolerance (and the L2 write-back allowance)
        if compute_util is not None and roof is not None and compute_util > 1.0:
            reasons.append(
                f"FLOP/s {100 * compute_util:.0f}% of the {roof.dtype} roof, within {tolerance:.0%}"
            )
        if memory_util > 1.0:
            reasons.append(
                f"bandwidth {100 * memory_util:.0f}% of the memory roof, within {memory_slack:.0%}"
            )
    return PlacedPoint(
        **base,
        view=view,
        intensity=intensity,
        flops_per_s=flops,
        bytes_per_s=bytes_per_s,
        roof=roof if view == "roofline" else None,
        compute_util=compute_util,
        memory_util=memory_util,
        above_roof=above_roof,
        reason="; ".join(reasons),
    )


def roofline_geometry(
    ceilings: Ceilings, points: Sequence[RooflinePoint], *, tolerance: float = BELOW_FLOOR_TOLERANCE
) -> RooflineGeometry:
    """What ``roofline_chart`` draws, computed without matplotlib.

    Roofs: one per positive entry of ``ceilings.flops_per_s``, lowest first, each with its ridge point
    (peak / bandwidth). A point is above the roof when its FLOP/s exceed its roof (its ``peak_dtype``'s,
    else the highest) or its bandwidth the memory roof by more than ``tolerance`` (for bandwidth, plus
    the L2 write-back allowance for its ``bytes_min``), the same rule that sets roofline.json's
    below_floor; ``tolerance=0`` flags any excess. A point over a roof by less is not flagged, but its
    ``reason`` and a footnote say so. Axis limits: x from a decade below the lowest to a
    decade above the highest of the placed intensities and the ridges; y from the memory roof at the left
    edge (or a decade below the lowest point, if lower) to half a decade above the highest roof or point.
    The memory-bound view's axis runs from 0 to 1.15 times the larger of the bandwidth and the fastest
    point."""
    roofs = _roofs(ceilings)
    bandwidth = float(ceilings.bandwidth_bytes_per_s)
    placed = tuple(_place(i, p, ceilings, roofs, tolerance) for i, p in enumerate(points))
    on_roofline = [p for p in placed if p.view == "roofline"]
    on_memory = [p for p in placed if p.view == "memory"]

    xlim = ylim = None
    if on_roofline or not on_memory:
        xs = [p.intensity for p in on_roofline if p.intensity] + [roof.ridge for roof in roofs]
        xs = xs or [1.0]  # no roof and no point: a decade either side of 1 FLOP/byte
        margin = 10.0**MARGIN_DECADES
        xlim = (min(xs) / margin, max(xs) * margin)
        ys = [p.flops_per_s for p in on_roofline if p.flops_per_s]
        # the highest roof, or without any the memory roof at the highest intensity
        top = max(ys + ([roof.flops_per_s for roof in roofs] or [bandwidth * max(xs)]))
        bottom = min([bandwidth * xlim[0]] + [y / margin for y in ys])
        ylim = (bottom, top * 10.0**HEADROOM_DECADES)
    memory_xlim = None
    if on_memory:
        memory_xlim = (0.0, 1.15 * max([bandwidth] + [p.bytes_per_s or 0.0 for p in on_memory]))

    path = tuple(p.label for p in on_roofline if p.kind in ("baseline", "champion"))
    notes = [f"ceilings: {ceilings.device}, {ceilings.source or 'source not given'}"]
    if on_memory:
        notes.append(
            "flops = 0 (pure data movement): no place on a FLOP/s roofline; shown as achieved bytes/s "
            "against the bandwidth roof: " + ", ".join(p.label for p in on_memory)
        )
    left_out = [p for p in placed if p.view == "left out"]
    if left_out:
        notes.append("left out: " + "; ".join(f"{p.label} ({p.reason})" for p in left_out))
    above = [p for p in placed if p.above_roof]
    if above:
        notes.append(
            f"{ABOVE_ROOF_NOTE}, never a win: " + "; ".join(f"{p.label} ({p.reason})" for p in above)
        )
    allowed = [p for p in placed if p.reason and not p.above_roof and p.view != "left out"]
    if allowed:
        notes.append(
            "over a roof by less than the roofline model's tolerance (2%; for bandwidth plus the L2 "
            "write-back allowance, L2 size / bytes moved): "
            + "; ".join(f"{p.label} ({p.reason})" for p in allowed)
        )
    return RooflineGeometry(
        device=ceilings.device,
        bandwidth=bandwidth,
        roofs=roofs,
        points=placed,
        xlim=xlim,
        ylim=ylim,
        memory_xlim=memory_xlim,
        path=path,
        notes=tuple(notes),
    )


# --- drawing ----------------------------------------------------------------------------------------------


def _figure(size: tuple[float, float] = (8, 5.5), dpi: int = 120):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # A Figure on its own Agg canvas, without pyplot: no global backend switch, no GUI, nothing left open.
    fig = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def chart_figure():
    """A 1600 x 1000 px figure on its own Agg canvas (no pyplot), for the charts of this module and
    ``kopt_core.run.charts``."""
    return _figure(CHART_SIZE, CHART_DPI)


def add_footnotes(fig, notes: Sequence[str]) -> None:
    """Footnotes at the bottom left of a chart figure, one per line (long ones wrapped)."""
    import textwrap

    lines = [line for note in notes for line in textwrap.wrap(note, 170, subsequent_indent="    ")]
    fig.text(0.015, 0.012, "\n".join(lines), ha="left", va="bottom", fontsize=11, color="#333333")


def footnote_space(notes: Sequence[str]) -> float:
    """The figure fraction the footnotes of ``add_footnotes`` take."""
    lines = sum(max(1, math.ceil(len(note) / 170)) for note in notes)
    return 0.02 + 0.021 * lines


def _log_frac(value: float, lim: tuple[float, float]) -> float:
    lo, hi = math.log10(lim[0]), math.log10(lim[1])
    return (math.log10(value) - lo) / (hi - lo)


def _spread(wanted: Sequence[float], gap: float, top: float = 0.98) -> list[float]:
    """Positions (axes fractions) near ``wanted``, ascending, at least ``gap`` apart and not above ``top``."""
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    out = [0.0] * len(wanted)
    last = -math.inf
    for i in order:
        out[i] = max(wanted[i], last + gap)
        last = out[i]
    overflow = last - top
    if overflow > 0:
        for i in order:
            out[i] -= overflow
    return out


def roofline_chart(ceilings: Ceilings, points: Sequence[RooflinePoint], path, *, title: str = "") -> Path:
    """Write the roofline of ``points`` on ``ceilings`` as a 1600 x 1000 px PNG to ``path``; return it.

    The FLOP/s roofline (log-log): arithmetic intensity (FLOP/byte) on x, achieved FLOP/s on y; the
    memory roof (bandwidth x intensity) and one flat compute roof per precision the ceilings hold, each
    labelled with its rate and ridge point, the ridge points marked with diamonds. Points: the baseline
    (black square), champions (vermillion circles), other kernels (blue triangles), each labelled with
    its rate and its share of its roof; the baseline and champions are joined by arrows in the order
    given. A point above a roof (``roofline_geometry``) is a purple X, its label says so and a footnote
    says "above the roof: measurement or model error".

    Kernels whose workload does no arithmetic (flops == 0) have no place on a FLOP/s roofline: they are
    drawn in a memory-bound view instead, one horizontal bar per kernel of its achieved bytes/s against
    the bandwidth roof (a vertical line), with its share of the roof written on the bar. With only such
    kernels the view fills the chart; with both kinds it stands to the right of the roofline. Points
    whose flops or bytes are unknown are left out and named in a footnote, as are the ceilings' source.
    The legend stands outside the axes, so it covers no point."""
    geometry = roofline_geometry(ceilings, points)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig = chart_figure()
    rows = _legend_rows(geometry)
    bottom = footnote_space(geometry.notes) + 0.045 * rows + 0.085
    top = 0.84 if geometry.memory_xlim is not None else 0.90  # room for the memory view's title
    height = top - bottom
    handles: list = []
    if geometry.xlim is not None and geometry.memory_xlim is not None:
        roof_ax = fig.add_axes((0.065, bottom, 0.57, height))
        memory_ax = fig.add_axes((0.72, bottom, 0.26, height))
    elif geometry.xlim is not None:
        roof_ax, memory_ax = fig.add_axes((0.065, bottom, 0.915, height)), None
    else:
        roof_ax, memory_ax = None, fig.add_axes((0.12, bottom, 0.84, height))
    if roof_ax is not None:
        handles += _draw_roofs(roof_ax, geometry)
        handles += _draw_points(roof_ax, geometry)
        _label_roofs(roof_ax, geometry)
    if memory_ax is not None:
        handles += _draw_memory_view(memory_ax, geometry)
    _legend(fig, handles, y=footnote_space(geometry.notes) + 0.005)
    fig.suptitle(title or f"roofline: {geometry.device}", fontsize=17, y=0.975)
    add_footnotes(fig, geometry.notes)
    fig.savefig(target, format="png")
    return target


LEGEND_COLUMNS = 4


def _legend_rows(g: RooflineGeometry) -> int:
    """How many rows the legend below the axes takes (an upper bound: its entries are counted loosely)."""
    kinds = {p.kind for p in g.points if p.view != "left out"}
    entries = 1 + 2 * bool(g.roofs) + len(kinds) + any(p.above_roof for p in g.points) + (len(g.path) > 1)
    return max(1, math.ceil(entries / LEGEND_COLUMNS))


def _legend(fig, handles: list, *, y: float) -> None:
    """One legend for the chart, below the axes and above the footnotes: it covers no point."""
    seen: dict[str, Any] = {}
    for handle in handles:
        seen.setdefault(handle.get_label(), handle)
    if seen:
        fig.legend(
            list(seen.values()),
            list(seen),
            loc="lower center",
            bbox_to_anchor=(0.5, y),
            ncol=min(LEGEND_COLUMNS, len(seen)),
            fontsize=12,
            frameon=True,
            framealpha=1.0,
            columnspacing=2.0,
        )


def _line(**kwargs):
    from matplotlib.lines import Line2D

    return Line2D([], [], **kwargs)


def _roof_colour(i: int) -> str:
    return PALETTE[ROOF_COLOURS[i % len(ROOF_COLOURS)]]


def _draw_roofs(ax, g: RooflineGeometry) -> list:
    """The memory roof up to the highest ridge, each compute roof from its ridge on, the ridge points."""
    assert g.xlim is not None and g.ylim is not None
    x_lo, x_hi = g.xlim
    bw = g.bandwidth
    top_ridge = min(g.roofs[-1].ridge, x_hi) if g.roofs else x_hi
    ax.plot([x_lo, top_ridge], [bw * x_lo, bw * top_ridge], color=MEMORY_COLOUR, lw=3, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*g.xlim)
    ax.set_ylim(*g.ylim)
    for i, roof in enumerate(g.roofs):
        colour = _roof_colour(i)
        style = "-" if i % 2 == 0 else "--"
        ax.plot([roof.ridge, x_hi], [roof.flops_per_s] * 2, color=colour, lw=2.5, ls=style, zorder=3)
        ax.plot([roof.ridge], [roof.flops_per_s], marker="D", ms=9, color=colour, mec="black", zorder=4)

    # the memory roof's label, along its slope near the left edge
    x0 = x_lo * 10 ** (0.06 * math.log10(x_hi / x_lo))
    x1 = x0 * 2
    (px0, py0), (px1, py1) = ax.transData.transform([(x0, bw * x0), (x1, bw * x1)])
    angle = math.degrees(math.atan2(py1 - py0, px1 - px0))
    ax.annotate(
        f"memory roof: {format_rate(bw, 'B/s')}",
        xy=(x0, bw * x0),
        xytext=(0, 8),
        textcoords="offset points",
        rotation=angle,
        rotation_mode="anchor",
        fontsize=13,
        color=MEMORY_COLOUR,
        fontweight="bold",
        zorder=5,
    )
    ax.set_xlabel("arithmetic intensity (FLOP / byte of the workload model's bytes_min)", fontsize=14)
    ax.set_ylabel("achieved FLOP/s", fontsize=14)
    ax.tick_params(labelsize=12)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.1)
    handles = [_line(color=MEMORY_COLOUR, lw=3, label="memory roof (measured bandwidth)")]
    if g.roofs:
        handles.append(_line(color=PALETTE["green"], lw=2.5, label="compute roof, one per precision"))
        handles.append(
            _line(marker="D", ms=9, color=PALETTE["grey"], mec="black", ls="none", label="ridge point")
        )
    return handles


ROOF_LABEL_STEP = 20  # points between the stacked places a roof's label may take


def _label_roofs(ax, g: RooflineGeometry) -> None:
    """Each compute roof's label (name, rate, ridge point) on its line: at the right edge or just after
    its ridge, above or below the line, further off if need be; the first place that overlaps no other
    text, marker or label, else the least crowded one."""
    from matplotlib.transforms import Bbox

    assert g.xlim is not None
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = [t.get_window_extent(renderer) for t in ax.texts]
    for line in ax.lines:  # the markers (points and ridges)
        if line.get_marker() not in (None, "None", "", " "):
            for x, y in ax.transData.transform(line.get_xydata()):
                taken.append(Bbox.from_extents(x - 9, y - 9, x + 9, y + 9))
    places = []
    for level in range(4):
        for anchor in ("right", "ridge"):
            places.append((anchor, 5 + level * ROOF_LABEL_STEP, "bottom"))
            places.append((anchor, -5 - level * ROOF_LABEL_STEP, "top"))

    def overlap(box) -> float:
        outside = box.width * box.height - _area(Bbox.intersection(box, frame))
        return outside * 10 + sum(_area(Bbox.intersection(box, other)) for other in taken)

    for i, roof in enumerate(g.roofs):
        best = None
        for anchor, dy, va in places:
            x = g.xlim[1] / 1.08 if anchor == "right" else roof.ridge * 1.15
            text = ax.annotate(
                f"{roof.name}: {format_rate(roof.flops_per_s, 'FLOP/s')}  (ridge {roof.ridge:.3g} FLOP/B)",
                xy=(x, roof.flops_per_s),
                xytext=(0, dy),
                textcoords="offset points",
                ha="right" if anchor == "right" else "left",
                va=va,
                fontsize=12,
                bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": _roof_colour(i), "lw": 1.5},
                zorder=5,
            )
            box = text.get_window_extent(renderer).padded(3)
            cost = overlap(box)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, text, box)
            else:
                text.remove()
            if cost == 0:
                break
        if best is not None:
            taken.append(best[2])


def _area(box) -> float:
    return 0.0 if box is None else box.width * box.height


def _percent(fraction: float) -> str:
    """3 significant figures at most, 0.1% or 2 figures below 10%: 0.37%, 4.1%, 82.3%, 113%."""
    value = 100 * fraction
    return f"{value:.2g}%" if abs(value) < 10 else f"{value:.1f}%" if abs(value) < 100 else f"{value:.0f}%"


def _point_text(p: PlacedPoint) -> str:
    """ "iterv1: 19.1 TFLOP/s, 37.5% of the float32 roof": the share of the roof above it (the memory roof
    left of the ridge, its compute roof right of it)."""
    text = f"{p.label}: {format_rate(p.flops_per_s or 0.0, 'FLOP/s')}"
    compute_side = p.roof is not None and p.intensity is not None and p.intensity >= p.roof.ridge
    if compute_side and p.compute_util is not None and p.roof is not None:
        text += f", {_percent(p.compute_util)} of the {p.roof.dtype} roof"
    elif p.memory_util is not None:
        text += f", {_percent(p.memory_util)} of the memory roof"
    if p.above_roof:
        text += "\nABOVE THE ROOF: measurement or model error"
    elif p.reason:
        text += " (over the roof, within the allowance)"
    return text


def _draw_points(ax, g: RooflineGeometry) -> list:
    from matplotlib.transforms import blended_transform_factory

    assert g.ylim is not None and g.xlim is not None
    shown = [p for p in g.points if p.view == "roofline"]
    handles = []
    kinds = set()
    for p in shown:
        marker, colour = ABOVE_ROOF_STYLE if p.above_roof else KIND_STYLE[p.kind]
        ax.plot(
            [p.intensity],
            [p.flops_per_s],
            marker=marker,
            ms=15 if p.above_roof else 12,
            color=colour,
            mec="black",
            mew=1.2,
            ls="none",
            zorder=7,
        )
        kinds.add("above roof" if p.above_roof else p.kind)
    for kind, (marker, colour) in KIND_STYLE.items():
        if kind in kinds:
            handles.append(_line(marker=marker, ms=12, color=colour, mec="black", ls="none", label=kind))
    if "above roof" in kinds:
        marker, colour = ABOVE_ROOF_STYLE
        handles.append(
            _line(marker=marker, ms=14, color=colour, mec="black", ls="none", label=ABOVE_ROOF_NOTE)
        )

    chain = [p for p in shown if p.kind in ("baseline", "champion")]
    for a, b in pairwise(chain):
        (ax_, ay), (bx, by) = ax.transData.transform(
            [(a.intensity, a.flops_per_s), (b.intensity, b.flops_per_s)]
        )
        if math.hypot(bx - ax_, by - ay) < 24:  # too close for an arrow: a plain segment
            ax.plot([a.intensity, b.intensity], [a.flops_per_s, b.flops_per_s], color="#444444", lw=1.5)
            continue
        ax.annotate(
            "",
            xy=(b.intensity, b.flops_per_s),
            xytext=(a.intensity, a.flops_per_s),
            arrowprops={
                "arrowstyle": "-|>",
                "color": "#444444",
                "lw": 2,
                "shrinkA": 9,
                "shrinkB": 9,
                "mutation_scale": 22,
            },
            zorder=6,
        )
    if len(chain) > 1:
        handles.append(_line(color="#444444", lw=2, marker=">", ms=8, label="progress, in order"))

    # labels to the right of the points, spread so that none overlaps another
    blend = blended_transform_factory(ax.transData, ax.transAxes)
    wanted = [_log_frac(p.flops_per_s or 1.0, g.ylim) for p in shown]
    heights = [0.06 if p.above_roof else 0.038 for p in shown]
    fracs = _spread(wanted, max(heights, default=0.04), top=0.93)
    step = (g.xlim[1] / g.xlim[0]) ** 0.035  # the gap between a point and its label
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    for p, want, frac in zip(shown, wanted, fracs, strict=True):
        moved = abs(frac - want) > 0.005
        x = p.intensity or 1.0
        text = ax.annotate(
            _point_text(p),
            xy=(x, p.flops_per_s),
            xytext=(x * step, frac),
            textcoords=blend,
            ha="left",
            va="center",
            fontsize=12,
            color=ABOVE_ROOF_STYLE[1] if p.above_roof else "black",
            fontweight="bold" if p.above_roof else "normal",
            bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "#BBBBBB", "alpha": 0.88},
            arrowprops={"arrowstyle": "-", "color": "#777777", "lw": 0.8} if moved else None,
            zorder=8,
        )
        if text.get_window_extent(renderer).x1 > frame.x1:  # no room on the right: the left side
            text.xyann = (x / step, frac)
            text.set_horizontalalignment("right")
    if not shown:
        ax.text(
            0.5,
            0.5,
            "no kernel could be placed on the roofline (see the footnotes)",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=14,
            color="#555555",
        )
    return handles


def _draw_memory_view(ax, g: RooflineGeometry) -> list:
    assert g.memory_xlim is not None
    shown = [p for p in g.points if p.view == "memory"]
    ys = list(range(len(shown)))[::-1]  # the first point on top
    for y, p in zip(ys, shown, strict=True):
        _, colour = ABOVE_ROOF_STYLE if p.above_roof else KIND_STYLE[p.kind]
        ax.barh(
            y,
            p.bytes_per_s or 0.0,
            height=0.6,
            color=colour,
            alpha=0.85,
            edgecolor="black",
            hatch="xx" if p.above_roof else None,
            zorder=3,
        )
        text = f"{format_rate(p.bytes_per_s or 0.0, 'B/s')}, {_percent(p.memory_util or 0.0)} of the roof"
        if p.above_roof:
            text += "\nABOVE THE ROOF"
        elif p.reason:
            text += "\nwithin the allowance"
        ax.text(
            (p.bytes_per_s or 0.0) * 0.03,
            y,
            text,
            ha="left",
            va="center",
            fontsize=12,
            zorder=5,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
        )
    ax.axvline(g.bandwidth, color=MEMORY_COLOUR, lw=3, zorder=4)
    ax.text(
        g.bandwidth,
        1.005,
        f"memory roof\n{format_rate(g.bandwidth, 'B/s')}",
        transform=ax.get_xaxis_transform(),
        ha="center",
        va="bottom",
        fontsize=12,
        color=MEMORY_COLOUR,
        fontweight="bold",
    )
    ax.set_yticks(ys)
    ax.set_yticklabels([p.label for p in shown], fontsize=12)
    pad = max(0.7, (4 - len(shown)) / 2)  # a lone bar is not a slab: room for four
    ax.set_ylim(-pad, len(shown) - 1 + pad)
    ax.set_xlim(*g.memory_xlim)
    ax.xaxis.set_major_formatter(_rate_formatter("B/s"))
    ax.tick_params(axis="x", labelsize=11)
    ax.set_xlabel("achieved bytes/s (bytes_min / time)", fontsize=14)
    ax.set_title("memory-bound view (flops = 0)", fontsize=13, pad=42)
    ax.grid(True, axis="x", alpha=0.35)
    handles = [_line(color=MEMORY_COLOUR, lw=3, label="memory roof (measured bandwidth)")]
    for kind in dict.fromkeys(p.kind for p in shown if not p.above_roof):
        handles.append(
            _line(
                marker=KIND_STYLE[kind][0],
                ms=12,
                color=KIND_STYLE[kind][1],
                mec="black",
                ls="none",
                label=kind,
            )
        )
    if any(p.above_roof for p in shown):
        marker, colour = ABOVE_ROOF_STYLE
        handles.append(
            _line(marker=marker, ms=14, color=colour, mec="black", ls="none", label=ABOVE_ROOF_NOTE)
        )
    return handles


def _rate_formatter(unit: str):
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _pos: format_rate(value, unit) if value else "0")


# --- roofline.png of one profile ----------------------------------------------------------------------------


def profile_point(roofline: Roofline) -> RooflinePoint | None:
    """The kernel of a workload roofline as a point for ``roofline_chart``; None when roofline.json has no
    workload model (the heuristic), no achieved rates, or no ceilings to draw against."""
    if roofline.label != "roofline" or roofline.achieved is None or roofline.ceilings is None:
        return None
    if not (known(roofline.ceilings.bandwidth_bytes_per_s) or 0) > 0:
        return None
    a = roofline.achieved
    label = f"kernel ({a.duration_ms:.4g} ms)" if a.duration_ms else "kernel"
    point = RooflinePoint.from_roofline(roofline, label=label, kind="kernel")
    return point if point.intensity is not None and point.flops_per_s is not None else None


def plot_roofline(roofline: Roofline, path) -> Path:
    """Write roofline.png of one profile to ``path`` and return the path: ``roofline_chart`` with the
    kernel on it when roofline.json has a workload model (achieved rates and ceilings), else the bar
    chart of the three gaps (``plot_gaps``)."""
    point = profile_point(roofline)
    if point is None or roofline.ceilings is None:
        return plot_gaps(roofline, path)
    budget = ", ".join(f"{k} {roofline.axis_budget.get(k, 0)}" for k in AXES)
    title = (
        f"roofline: {roofline.ceilings.device}; bound {roofline.bound}"
        f"{', near peak' if roofline.near_peak else ''}; method budget {budget}"
    )
    return roofline_chart(roofline.ceilings, [point], path, title=title)


def plot_gaps(roofline: Roofline, path) -> Path:
    """Write the bar chart of ``roofline``'s three gaps (1 - utilisation) with the axis budget."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig = _figure()
    _draw_gaps(fig, roofline)
    fig.tight_layout()
    fig.savefig(target, format="png")
    return target


def _draw_gaps(fig, r: Roofline) -> None:
    ax = fig.add_subplot(1, 1, 1)
    deltas = {"compute": r.delta_compute, "memory": r.delta_memory, "latency": r.delta_latency}
    colours = {"compute": PALETTE["vermillion"], "memory": PALETTE["blue"], "latency": PALETTE["orange"]}
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

"""The progress of a run as a picture: the cumulative speedup over the baseline after each iteration.

``speedup_chart(points, path)`` writes it; ``speedup_geometry(points)`` computes what it draws without
matplotlib, so it can be checked. ``SpeedupPoint.from_timings`` builds a point from two bench.json
timings. The figure and palette are those of the roofline chart (``kopt_core.roofline.plot``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from kopt_core.records.bench import TimingStats
from kopt_core.roofline.plot import PALETTE, add_footnotes, chart_figure, footnote_space

HEADROOM = 1.22  # the y axis reaches this far above the highest bar or interval
BASELINE_COLOUR = PALETTE["grey"]
PROMOTED_COLOUR = PALETTE["blue"]
REJECTED_COLOUR = PALETTE["orange"]
CHAMPION_COLOUR = PALETTE["vermillion"]


@frozen
class SpeedupPoint:
    """One iteration: its champion's speedup over the baseline (cumulative: baseline time / its time;
    None when it produced none), the 95% interval of that speedup (None when unknown), whether it was
    promoted to be the run's best, and a label ("" gives "baseline" / "iterv{i}")."""

    iteration: int
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    promoted: bool
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or ("baseline" if self.iteration == 0 else f"iterv{self.iteration}")

    @classmethod
    def from_timings(
        cls, iteration: int, baseline: TimingStats, champion: TimingStats, *, promoted: bool, label: str = ""
    ) -> SpeedupPoint:
        """The speedup of ``champion`` over ``baseline`` (bench.json ``kernel_timing``s): the ratio of their
        medians, and an interval from the ends of both medians' 95% intervals (``median_ci_rel``), the
        slowest champion against the fastest baseline and the reverse: wider than the ratio's own
        interval, never narrower."""
        speedup = baseline.median_ms / champion.median_ms
        base_rel, champ_rel = baseline.median_ci_rel, champion.median_ci_rel
        low = baseline.median_ms * (1 - base_rel) / (champion.median_ms * (1 + champ_rel))
        high = (
            baseline.median_ms * (1 + base_rel) / (champion.median_ms * (1 - champ_rel))
            if champ_rel < 1
            else None
        )
        return cls(iteration, speedup, low, high, promoted, label)


@frozen
class SpeedupGeometry:
    """What ``speedup_chart`` draws: the iterations in order (0, the baseline, always first), each bar's
    height (None: no result), the champion after each iteration (the step line: the last promoted
    speedup, 1.0 before any), the y limits, and which iterations were promoted or have no result."""

    iterations: tuple[int, ...]
    names: tuple[str, ...]
    heights: tuple[float | None, ...]
    ci: tuple[tuple[float, float] | None, ...]
    champion: tuple[float, ...]
    promoted: tuple[int, ...]
    missing: tuple[int, ...]
    ylim: tuple[float, float]


def _with_baseline(points: Sequence[SpeedupPoint]) -> list[SpeedupPoint]:
    ordered = sorted(points, key=lambda p: p.iteration)
    iterations = [p.iteration for p in ordered]
    if len(set(iterations)) != len(iterations):
        raise ValueError(f"speedup points repeat an iteration: {iterations}")
    if any(i < 0 for i in iterations):
        raise ValueError(f"speedup points have a negative iteration: {iterations}")
    if not ordered or ordered[0].iteration != 0:
        ordered.insert(0, SpeedupPoint(0, 1.0, None, None, False))
    elif ordered[0].speedup is None:  # the baseline is 1.0x by definition
        first = ordered[0]
        ordered[0] = SpeedupPoint(0, 1.0, first.ci_low, first.ci_high, first.promoted, first.label)
    return ordered


def speedup_geometry(points: Sequence[SpeedupPoint]) -> SpeedupGeometry:
    """What ``speedup_chart`` draws, computed without matplotlib. The baseline (iteration 0, 1.0x) is
    added when ``points`` lack it; a repeated or negative iteration is a ValueError. The y axis runs from
    0 to HEADROOM times the highest of 1.0, the speedups and the interval tops."""
    ordered = _with_baseline(points)
    champion, current = [], 1.0
    for p in ordered:
        if p.iteration > 0 and p.promoted and p.speedup is not None:
            current = p.speedup
        champion.append(current)
    ci = tuple(
        (p.ci_low, p.ci_high) if p.ci_low is not None and p.ci_high is not None else None for p in ordered
    )
    tops = [1.0] + [p.speedup for p in ordered if p.speedup is not None] + [c[1] for c in ci if c]
    return SpeedupGeometry(
        iterations=tuple(p.iteration for p in ordered),
        names=tuple(p.name for p in ordered),
        heights=tuple(p.speedup for p in ordered),
        ci=ci,
        champion=tuple(champion),
        promoted=tuple(p.iteration for p in ordered if p.promoted and p.iteration > 0),
        missing=tuple(p.iteration for p in ordered if p.speedup is None),
        ylim=(0.0, max(tops) * HEADROOM),
    )


def speedup_chart(
    points: Sequence[SpeedupPoint],
    path,
    *,
    title: str = "",
    speedup_note: str = "baseline median time / the iteration champion's (cumulative over the baseline)",
    interval_note: str = "from both medians' intervals",
) -> Path:
    """Write the cumulative speedup per iteration as a 1600 x 1000 px PNG to ``path``; return it.

    One bar per iteration: the baseline (grey, 1.0x), promoted iterations (solid blue), iterations whose
    champion was not promoted (orange, hatched, lighter); an iteration without a result is a dashed
    outline marked "no result". Each bar has its 95% interval as an error bar and its value (and the
    interval) written above it; a dashed line marks 1.0x, and a vermillion step line the run's champion
    after each iteration. The legend stands below the axes."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    g = speedup_geometry(points)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig = chart_figure()
    notes = [f"speedup: {speedup_note}; error bars: 95% interval {interval_note}"]
    if g.missing:
        notes.append("no result: " + ", ".join(g.names[g.iterations.index(i)] for i in g.missing))
    bottom = footnote_space(notes) + 0.14
    ax = fig.add_axes((0.07, bottom, 0.91, 0.88 - bottom))
    xs = list(range(len(g.iterations)))
    y_hi = g.ylim[1]
    for x, iteration, height, ci in zip(xs, g.iterations, g.heights, g.ci, strict=True):
        promoted = iteration in g.promoted
        if height is None:
            ax.bar(x, y_hi * 0.25, width=0.6, color="none", edgecolor="#777777", ls="--", lw=1.5)
            ax.text(x, y_hi * 0.125, "no\nresult", ha="center", va="center", fontsize=13, color="#555555")
            continue
        if iteration == 0:
            style: dict[str, Any] = {"color": BASELINE_COLOUR}
        elif promoted:
            style = {"color": PROMOTED_COLOUR}
        else:
            style = {"color": REJECTED_COLOUR, "alpha": 0.55, "hatch": "//"}
        ax.bar(x, height, width=0.6, edgecolor="black", lw=1.2, zorder=3, **style)
        top = height
        if ci is not None:
            low, high = ci
            ax.errorbar(
                x,
                height,
                yerr=[[max(0.0, height - low)], [max(0.0, high - height)]],
                fmt="none",
                ecolor="black",
                elinewidth=2,
                capsize=10,
                capthick=2,
                zorder=5,
            )
            top = max(top, high)
        text = f"{height:.3g}x" if iteration else "1.0x"
        if ci is not None:
            text += f"\n[{ci[0]:.3g}, {ci[1]:.3g}]"
        ax.annotate(
            text,
            xy=(x, top),
            xytext=(0, 6),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=14 if len(xs) <= 12 else 10,
            fontweight="bold",
            zorder=6,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
        )
    ax.step(xs, g.champion, where="mid", color=CHAMPION_COLOUR, lw=3, zorder=4)
    ax.axhline(1.0, color="#333333", ls="--", lw=1.5, zorder=2)
    ax.text(-0.57, 1.0, "1.0x", ha="left", va="bottom", fontsize=12, color="#333333")
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_ylim(*g.ylim)
    ax.set_xticks(xs)
    ax.set_xticklabels(
        [
            name if i == 0 else f"{name}\n{'promoted' if i in g.promoted else 'not promoted'}"
            for name, i in zip(g.names, g.iterations, strict=True)
        ],
        fontsize=13 if len(xs) <= 12 else 9,
    )
    ax.tick_params(axis="y", labelsize=12)
    ax.set_ylabel("speedup over the baseline (x)", fontsize=14)
    ax.grid(True, axis="y", alpha=0.35, zorder=0)
    handles = [
        Patch(facecolor=BASELINE_COLOUR, edgecolor="black", label="baseline (1.0x)"),
        Patch(facecolor=PROMOTED_COLOUR, edgecolor="black", label="promoted"),
        Patch(facecolor=REJECTED_COLOUR, alpha=0.55, hatch="//", edgecolor="black", label="not promoted"),
        Line2D([], [], color=CHAMPION_COLOUR, lw=3, label="champion after the iteration"),
        Line2D([], [], color="black", marker="_", ms=14, mew=2, ls="-", lw=2, label="95% interval"),
        Line2D([], [], color="#333333", ls="--", lw=1.5, label="1.0x: as fast as the baseline"),
    ]
    fig.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, footnote_space(notes) + 0.005),
        ncol=3,
        fontsize=12,
        framealpha=1.0,
    )
    fig.suptitle(title or "speedup over the baseline per iteration", fontsize=17, y=0.965)
    add_footnotes(fig, notes)
    fig.savefig(target, format="png")
    return target

"""The roofline chart and the speedup chart: what they compute (geometry with known answers) and that the
PNGs are written at 1600 x 1000 px (CPU, Agg)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib import image  # noqa: E402

from kopt_core.records.bench import TimingStats, Workload  # noqa: E402
from kopt_core.records.roofline import DEFAULT_CEILINGS, Ceilings  # noqa: E402
from kopt_core.roofline import compute_roofline  # noqa: E402
from kopt_core.roofline import plot as plot_module  # noqa: E402
from kopt_core.roofline.plot import (  # noqa: E402
    ABOVE_ROOF_NOTE,
    PALETTE,
    RooflinePoint,
    roofline_chart,
    roofline_geometry,
)
from kopt_core.run.charts import SpeedupPoint, speedup_chart, speedup_geometry  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BW, FP32, FP16 = 4.28e12, 50.9e12, 769e12
H200 = Ceilings(device="H200-like", bandwidth_bytes_per_s=BW, flops_per_s={"float32": FP32, "float16": FP16})
N = 2048
FLOPS, BYTES = 2.0 * N**3, 12.0 * N**2  # sgemm 2048^3: intensity 341.33 FLOP/byte
INTENSITY = FLOPS / BYTES


def bench_workload(ms: float) -> Workload:
    """bench.json's Workload of the sgemm when its median is ``ms``."""
    seconds = ms / 1e3
    return Workload(FLOPS, BYTES, tflops=FLOPS / seconds / 1e12, tbytes_per_s=BYTES / seconds / 1e12)


def sgemm_points() -> list[RooflinePoint]:
    return [
        RooflinePoint.from_workload("baseline", bench_workload(3.14), "baseline", peak_dtype="float32"),
        RooflinePoint.from_workload("iterv1", bench_workload(1.0), "champion", peak_dtype="float32"),
        RooflinePoint.from_workload("iterv2", None, "champion"),  # no workload model
        RooflinePoint.from_workload("iterv3", bench_workload(0.3), "champion", peak_dtype="float32"),
    ]


def png_shape(path: Path) -> tuple[int, ...]:
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    return image.imread(str(path)).shape


def colour_share(path: Path, hex_colour: str, tolerance: float = 0.02) -> float:
    """The share of the PNG's pixels that are ``hex_colour``."""
    pixels = image.imread(str(path))[..., :3]
    rgb = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    return float((abs(pixels - rgb).max(axis=-1) <= tolerance).mean())


def has_colour(path: Path, hex_colour: str) -> bool:
    """Whether any pixel of the PNG is ``hex_colour``."""
    return colour_share(path, hex_colour) > 0


# --- the roofline's geometry ------------------------------------------------------------------------------


def test_from_workload_gives_the_rates_of_bench_json():
    p = RooflinePoint.from_workload("baseline", bench_workload(3.14), "baseline")
    assert p.intensity == pytest.approx(341.333, rel=1e-5)
    assert p.flops_per_s == pytest.approx(FLOPS / 3.14e-3)
    assert p.bytes_per_s == pytest.approx(BYTES / 3.14e-3)
    # a workload mapping and a duration give the same point
    q = RooflinePoint.from_workload(
        "baseline", {"flops": FLOPS, "bytes_min": BYTES}, "baseline", duration_ms=3.14
    )
    assert q.flops_per_s == pytest.approx(p.flops_per_s) and q.intensity == pytest.approx(p.intensity)
    # unknown parts: a point that is left out
    assert RooflinePoint.from_workload("x", None, "kernel").intensity is None
    assert RooflinePoint.from_workload("x", {"flops": FLOPS}, "kernel").flops_per_s is None
    assert RooflinePoint.from_workload("x", Workload(FLOPS, BYTES), "kernel").flops_per_s is None
    with pytest.raises(ValueError):
        RooflinePoint("x", 1.0, 1.0, "winner")  # type: ignore[arg-type]


def test_h200_geometry_ridges_limits_and_verdicts():
    g = roofline_geometry(H200, sgemm_points())
    assert [r.dtype for r in g.roofs] == ["float32", "float16"]
    assert g.ridges == pytest.approx({"float32": FP32 / BW, "float16": FP16 / BW})
    assert g.ridges["float32"] == pytest.approx(11.89, abs=0.01)
    assert g.ridges["float16"] == pytest.approx(179.7, abs=0.1)
    # x: a decade below the fp32 ridge to a decade above the sgemm's intensity
    assert g.xlim == pytest.approx((FP32 / BW / 10, INTENSITY * 10))
    # y: from the lower of the memory roof at the left edge and a decade below the baseline, to half a
    # decade above the fp16 roof
    baseline_rate = FLOPS / 3.14e-3
    assert g.ylim == pytest.approx((min(BW * FP32 / BW / 10, baseline_rate / 10), FP16 * math.sqrt(10)))
    assert g.ylim[0] == pytest.approx(baseline_rate / 10)
    assert g.placed == ("baseline", "iterv1", "iterv3")
    assert g.left_out == ("iterv2",)
    assert g.above_roof == ("iterv3",)  # 57.3 TFLOP/s over fp32's 50.9: 113%
    assert g.path == ("baseline", "iterv1", "iterv3")  # joined in order, the left-out one skipped
    assert g.memory_only == () and g.memory_xlim is None
    by_label = {p.label: p for p in g.points}
    assert by_label["iterv1"].compute_util == pytest.approx(FLOPS / 1e-3 / FP32)
    assert by_label["iterv3"].compute_util == pytest.approx(FLOPS / 0.3e-3 / FP32)
    assert "float32 roof" in by_label["iterv3"].reason
    assert "no workload model" in by_label["iterv2"].reason
    notes = "\n".join(g.notes)
    assert ABOVE_ROOF_NOTE in notes and "iterv3" in notes and "left out: iterv2" in notes
    assert "H200-like" in notes


def test_the_roof_a_point_is_judged_against_and_the_tolerance():
    just_over = RooflinePoint("k", 1000.0, FP32 * 1.01, "kernel", peak_dtype="float32")
    assert roofline_geometry(H200, [just_over]).above_roof == ()  # within roofline.json's 2%
    assert roofline_geometry(H200, [just_over], tolerance=0.0).above_roof == ("k",)
    # no peak dtype: judged against the highest roof, which 60 TFLOP/s does not reach
    no_dtype = RooflinePoint("k", 1000.0, 60e12, "kernel")
    assert roofline_geometry(H200, [no_dtype]).above_roof == ()
    assert roofline_geometry(H200, [no_dtype]).points[0].roof.dtype == "float16"
    # an unknown dtype falls back to the highest roof too
    odd = RooflinePoint("k", 1000.0, 60e12, "kernel", peak_dtype="int4")
    assert roofline_geometry(H200, [odd]).points[0].roof.dtype == "float16"
    # a memory-bound kernel above the bandwidth: 0.25 FLOP/byte at 1.5 TFLOP/s is 6 TB/s
    streaming = RooflinePoint("s", 0.25, 1.5e12, "kernel", peak_dtype="float32")
    g = roofline_geometry(H200, [streaming])
    assert g.above_roof == ("s",) and "memory roof" in g.points[0].reason
    assert g.points[0].memory_util == pytest.approx(6e12 / BW)
    # the L2 write-back allowance: 60 MiB over 200 MB moved lets 133% through, as roofline.json does
    small = RooflinePoint("s", 0.25, 1.3e12, "kernel", bytes_min=2e8)  # 5.2 TB/s: 121%
    with_l2 = Ceilings("H200", BW, {"float32": FP32}, l2_cache_bytes=60 * 2**20)
    allowed = roofline_geometry(with_l2, [small])
    assert allowed.above_roof == () and "121% of the memory roof, within 33%" in allowed.points[0].reason
    assert any("less than the roofline model's tolerance" in note for note in allowed.notes)
    assert roofline_geometry(H200, [small]).above_roof == ("s",)


@pytest.mark.parametrize("ms", [3.140224, 0.4, 0.35, 0.3, 0.1])
def test_above_the_roof_agrees_with_below_floor(ms):
    r = compute_roofline(
        {}, duration_ms=ms, workload={"flops": FLOPS, "bytes_min": BYTES}, ceilings=H200, peak_dtype="float32"
    )
    g = roofline_geometry(H200, [RooflinePoint.from_roofline(r)])
    assert bool(g.above_roof) == r.below_floor


def test_pure_data_movement_goes_to_the_memory_view():
    copy = {"flops": 0, "bytes_min": 2e8}
    points = [
        RooflinePoint.from_workload("baseline", copy, "baseline", duration_ms=0.08),  # 2.5 TB/s
        RooflinePoint.from_workload("iterv1", copy, "champion", duration_ms=0.05),  # 4 TB/s
        RooflinePoint.from_workload("iterv2", {"flops": 0, "bytes_min": None}, "champion"),
    ]
    g = roofline_geometry(H200, points)
    assert g.memory_only == ("baseline", "iterv1") and g.left_out == ("iterv2",)
    assert g.placed == () and g.xlim is None and g.ylim is None
    assert g.memory_xlim == pytest.approx((0.0, 1.15 * BW))
    assert [p.memory_util for p in g.points[:2]] == pytest.approx([2.5e12 / BW, 4e12 / BW])
    assert any("flops = 0" in note for note in g.notes)
    # faster than the bandwidth allows: above the roof in the memory view too
    fast = RooflinePoint.from_workload("fast", copy, "kernel", duration_ms=0.02)  # 10 TB/s
    g = roofline_geometry(H200, [fast])
    assert g.above_roof == ("fast",) and g.memory_xlim == pytest.approx((0.0, 1.15 * 10e12))
    # both kinds: the roofline and the memory view side by side
    mixed = roofline_geometry(H200, [sgemm_points()[0], points[1]])
    assert mixed.placed == ("baseline",) and mixed.memory_only == ("iterv1",)
    assert mixed.xlim is not None and mixed.memory_xlim is not None


def test_no_point_and_no_compute_roof():
    g = roofline_geometry(H200, [])
    assert g.xlim == pytest.approx((FP32 / BW / 10, FP16 / BW * 10)) and g.placed == ()
    bare = Ceilings("memory only", BW, {})
    g = roofline_geometry(bare, [RooflinePoint("k", 2.0, 4e12, "kernel")])
    assert g.roofs == () and g.xlim == pytest.approx((0.2, 20.0))
    # without a compute roof the top is the memory roof at the highest intensity, half a decade up
    assert g.ylim == pytest.approx((min(BW * 0.2, 4e11), BW * 2 * math.sqrt(10)))
    with pytest.raises(ValueError, match="bandwidth"):
        roofline_geometry(Ceilings("broken", 0.0, {"float32": FP32}), [])


# --- the PNGs -----------------------------------------------------------------------------------------


def test_roofline_chart_png(tmp_path):
    out = roofline_chart(H200, sgemm_points(), tmp_path / "charts" / "roofline.png", title="sgemm 2048^3")
    assert out == tmp_path / "charts" / "roofline.png"
    assert png_shape(out)[:2] == (1000, 1600)
    assert has_colour(out, PALETTE["vermillion"])  # the champions
    assert has_colour(out, PALETTE["purple"])  # iterv3, above the roof
    honest = roofline_chart(H200, sgemm_points()[:2], tmp_path / "honest.png")
    assert not has_colour(honest, PALETTE["purple"])  # nothing above the roof: no purple anywhere


@pytest.mark.parametrize(
    "points",
    [
        [],
        [RooflinePoint.from_workload("copy", {"flops": 0, "bytes_min": 2e8}, "baseline", duration_ms=0.05)],
        [
            RooflinePoint("sgemm", INTENSITY, 5e12, "baseline"),
            RooflinePoint("copy", 0.0, 0.0, "champion", bytes_per_s=9e12),
            RooflinePoint("unknown", None, None, "champion"),
        ],
    ],
    ids=["empty", "memory-only", "mixed"],
)
def test_roofline_chart_variants_png(tmp_path, points):
    assert png_shape(roofline_chart(DEFAULT_CEILINGS, points, tmp_path / "r.png"))[:2] == (1000, 1600)


def test_roofline_chart_draws_each_precision_the_ceilings_hold(tmp_path):
    # one roof per entry: the built-in H200 figures have five (int8 since 2026-12-01), each in its colour
    out = roofline_chart(DEFAULT_CEILINGS, sgemm_points()[:1], tmp_path / "r.png")
    assert len(roofline_geometry(DEFAULT_CEILINGS, []).roofs) == 5
    for colour in ("green", "orange", "sky", "grey", "black"):
        assert has_colour(out, PALETTE[colour]), colour


# --- the speedup chart --------------------------------------------------------------------------------


def test_speedup_geometry():
    g = speedup_geometry(
        [
            SpeedupPoint(2, 1.5, 1.45, 1.55, False),
            SpeedupPoint(1, 1.8, 1.7, 1.9, True),
            SpeedupPoint(3, None, None, None, False),
            SpeedupPoint(4, 3.0, 2.9, 3.2, True, label="tiled"),
        ]
    )
    assert g.iterations == (0, 1, 2, 3, 4)  # the baseline added, in order
    assert g.names == ("baseline", "iterv1", "iterv2", "iterv3", "tiled")
    assert g.heights == (1.0, 1.8, 1.5, None, 3.0)
    assert g.champion == (1.0, 1.8, 1.8, 1.8, 3.0)  # a point not promoted leaves the champion
    assert g.promoted == (1, 4) and g.missing == (3,)
    assert g.ci[0] is None and g.ci[4] == (2.9, 3.2)
    assert g.ylim == pytest.approx((0.0, 3.2 * 1.22))
    # slower than the baseline: the axis still shows 1.0x
    assert speedup_geometry([SpeedupPoint(1, 0.5, None, None, False)]).ylim == pytest.approx((0.0, 1.22))
    with pytest.raises(ValueError, match="repeat"):
        speedup_geometry([SpeedupPoint(1, 1.0, None, None, True), SpeedupPoint(1, 2.0, None, None, True)])


def _timing(median_ms: float, ci_rel: float) -> TimingStats:
    return TimingStats(
        mode="per_launch",
        l2="cold",
        clock="cuda_events",
        launches_per_sample=1,
        n=100,
        median_ms=median_ms,
        p95_ms=median_ms,
        mean_ms=median_ms,
        min_ms=median_ms,
        max_ms=median_ms,
        stddev_ms=0.0,
        cv=0.0,
        median_ci_rel=ci_rel,
        stop_reason="precision reached",
        warmup_ms=200.0,
        warmup_launches=10,
    )


def test_speedup_from_bench_timings():
    p = SpeedupPoint.from_timings(1, _timing(3.0, 0.01), _timing(1.0, 0.02), promoted=True)
    assert p.speedup == pytest.approx(3.0)
    assert p.ci_low == pytest.approx(3.0 * 0.99 / 1.02)
    assert p.ci_high == pytest.approx(3.0 * 1.01 / 0.98)
    assert p.ci_low < p.speedup < p.ci_high and p.name == "iterv1"


def test_speedup_chart_png(tmp_path):
    points = [
        SpeedupPoint(1, 2.87, 2.8, 2.95, True),
        SpeedupPoint(2, 2.6, 2.5, 2.71, False),
        SpeedupPoint(3, None, None, None, False),
        SpeedupPoint(4, 7.65, 7.5, 7.8, True),
    ]
    out = speedup_chart(points, tmp_path / "speedup.png", title="sgemm")
    assert png_shape(out)[:2] == (1000, 1600)
    # two promoted bars in blue (a tenth of the picture), the champion's step line in vermillion
    assert colour_share(out, PALETTE["blue"]) > 0.05 and has_colour(out, PALETTE["vermillion"])
    only_baseline = speedup_chart([], tmp_path / "none.png")
    assert png_shape(only_baseline)[:2] == (1000, 1600)
    assert colour_share(only_baseline, PALETTE["blue"]) < 0.001  # nothing promoted: blue in the legend only


# --- roofline.png of a profile --------------------------------------------------------------------------


@pytest.fixture
def chart_calls(monkeypatch):
    """The points each roofline_chart call was given."""
    calls: list[list[RooflinePoint]] = []
    real = plot_module.roofline_chart

    def spy(ceilings, points, path, *, title=""):
        calls.append(list(points))
        return real(ceilings, points, path, title=title)

    monkeypatch.setattr(plot_module, "roofline_chart", spy)
    return calls


def test_a_profile_with_a_workload_gets_the_real_roofline(tmp_path, chart_calls):
    from kopt_core.steps.profile import ImportContext, import_profile

    csv = REPO / "tests" / "fixtures" / "h200" / "naive_full_raw.csv"
    context = ImportContext(model={"flops": FLOPS, "bytes_min": BYTES}, dtype="float32")
    outcome = import_profile(csv, tmp_path, context=context)
    assert outcome.roofline.label == "roofline"
    assert png_shape(tmp_path / "roofline.png")[:2] == (1000, 1600)  # the roofline chart's size
    [points] = chart_calls
    [point] = points
    assert point.kind == "kernel" and point.intensity == pytest.approx(INTENSITY)
    assert point.flops_per_s == pytest.approx(FLOPS / 3.140224e-3, rel=1e-6)


def test_a_profile_without_a_workload_keeps_the_gap_chart(tmp_path, chart_calls):
    from kopt_core.steps.profile import import_profile

    outcome = import_profile(REPO / "tests" / "fixtures" / "h200" / "naive_basic_raw.csv", tmp_path)
    assert outcome.roofline.label == "bottleneck-gap heuristic"
    assert chart_calls == []
    assert png_shape(tmp_path / "roofline.png")[:2] == (660, 960)  # the gap chart: 8 x 5.5 in at 120 dpi

"""summary.md: what a run did, in plain Markdown (step 4 of a run, and every stopped run)."""

from __future__ import annotations

import math
from pathlib import Path

from kopt_core.jsonio import write_text_atomic
from kopt_core.records import read_bench_result
from kopt_core.records.state import ceilings_of
from kopt_core.run.layout import (
    BENCH_FILE,
    CHAMPION_PREFIX,
    ROOFLINE_FILE,
    SPEEDUP_CHART,
    SUMMARY_ROOFLINE_CHART,
    baseline_dir,
    iteration_dir,
)


def baseline_ms(run_dir: str | Path) -> float | None:
    """The baseline's median kernel time from baseline/bench.json, or None before the baseline was seeded."""
    try:
        timing = read_bench_result(baseline_dir(run_dir) / BENCH_FILE).kernel_timing
    except (OSError, ValueError):
        return None
    return timing.median_ms if timing is not None and math.isfinite(timing.median_ms) else None


def fmt_ms(value: float | None) -> str:
    if value is None or value != value:
        return "-"
    return f"{value * 1e3:.2f} us" if value < 1 else f"{value:.4f} ms"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _methods(label: str, methods) -> str:
    return f"- {label}: " + (", ".join(f"`{m}`" for m in methods) if methods else "none")


def render_summary(store) -> Path:
    """Write ``<run>/summary.md`` atomically from state.json (and stop.json, baseline/bench.json)."""
    state = store.load()
    stop = store.load_stop()
    base = baseline_ms(store.run_dir)
    lines = [f"# kopt run {Path(state.run_dir).name}", "", f"Status: **{state.run_status}**", ""]

    if state.run_status == "stopped" or stop is not None:
        lines += ["## Stopped", ""]
        if stop is not None:
            lines += [f"- stage: {stop.stage}", f"- reason: {stop.reason}", f"- exit code: {stop.exit_code}"]
            if stop.iteration is not None:
                lines.append(f"- iteration: {stop.iteration}")
            if stop.created_at:
                lines.append(f"- at: {stop.created_at}")
        else:
            lines += [
                f"- stage: {state.stop_stage or '-'}",
                f"- reason: {state.stop_reason or '-'}",
                "- exit code: - (stop.json is missing)",
            ]
        lines.append("")

    lines += ["## Result", ""]
    lines.append(f"- baseline: `{state.baseline_file}` ({fmt_ms(base)})")
    lines.append(f"- best: `{state.best_file}` ({fmt_ms(state.best_metric_ms)})")
    if base and state.best_metric_ms:
        lines.append(
            f"- speedup over the baseline: {base / state.best_metric_ms:.3f}x (ratio of the medians)"
        )
    chained = paired_chain(state, base)[-1] if state.history else None
    if chained is not None and chained != 1.0:
        lines.append(
            f"- chained paired speedup: {chained:.3f}x (the product of each promotion's paired speedup;"
            " the speedup chart draws it)"
        )
    lines.append(f"- backend: {state.backend}; dims: " + ", ".join(f"{k}={v}" for k, v in state.dims.items()))
    lines.append(
        f"- iterations verified: {state.verified_iterations} of {state.iterations_total} (at most)"
        + (
            f"; last verified: iterv{state.last_verified_iter}"
            if state.last_verified_iter is not None
            else ""
        )
    )
    lines.append(
        f"- generation allowed: {'yes' if state.generation_allowed else 'no'} "
        f"(hardware gate attempts: {state.hardware_attempts})"
    )
    lines.append("")

    lines += [
        "## Methods",
        "",
        _methods("selected", state.selected_methods),
        _methods("effective", state.effective_methods),
        _methods("ineffective", state.ineffective_methods),
        _methods("implementation-failed", state.implementation_failed_methods),
        _methods("unverified", state.unverified_methods),
        "",
    ]

    lines += _charts(store, state, base)
    lines += _iterations(state)

    lines += ["## History", ""]
    if state.history:
        lines += ["| iteration | kernel | best | methods | verified | note |", "|---|---|---|---|---|---|"]
        for entry in state.history:
            lines.append(
                "| "
                + " | ".join(
                    _cell(c)
                    for c in (
                        entry.iteration,
                        entry.kernel or "-",
                        fmt_ms(entry.best_ms),
                        ", ".join(entry.methods) or "-",
                        "yes" if entry.verified else "no",
                        entry.note or "",
                    )
                )
                + " |"
            )
    else:
        lines.append("No iterations ran.")
    lines.append("")
    return write_text_atomic(store.summary_path, "\n".join(lines))


def paired_chain(state, base: float | None) -> list[float | None]:
    """The champion's speedup over the baseline going into each iteration, and after the last (one more
    entry than the history): the product of the paired speedups of the promotions so far. Paired
    speedups are measured interleaved, so the chain is the run's honest cumulative speedup; a ratio of
    medians timed at different moments drifts from it by a few tenths of a percent. A promotion without
    a paired speedup (a run recorded before v7) carries the ratio of the baseline's median to the best's;
    None where neither is known."""
    chain: list[float | None] = [1.0]
    for entry in state.history:
        carried = chain[-1]
        if not entry.promoted:
            chain.append(carried)
        elif carried is not None and entry.speedup:
            chain.append(carried * entry.speedup)
        else:
            chain.append(base / entry.best_ms if base and entry.best_ms else None)
    return chain


def _speedup_points(state, base: float | None) -> list:
    """Each iteration's champion against the baseline: the paired chain going into the iteration times
    the champion's paired speedup over the best it was compared with (and its interval)."""
    from kopt_core.run.charts import SpeedupPoint

    points = []
    for entry, carried in zip(state.history, paired_chain(state, base)[:-1], strict=True):
        speedup = carried * entry.speedup if carried and entry.speedup else None
        ci = (
            (carried * entry.speedup_ci[0], carried * entry.speedup_ci[1])
            if carried and entry.speedup_ci is not None
            else (None, None)
        )
        points.append(
            SpeedupPoint(
                iteration=entry.iteration,
                speedup=speedup,
                ci_low=ci[0],
                ci_high=ci[1],
                promoted=bool(entry.promoted),
                label=f"iterv{entry.iteration}: {entry.champion}" if entry.champion else "",
            )
        )
    return points


def _roofline_points(state) -> list:
    """The baseline's profile and each iteration's champion profile, where a workload model placed them."""
    from kopt_core.jsonio import read_json
    from kopt_core.records import from_data
    from kopt_core.records.roofline import Roofline
    from kopt_core.roofline.plot import PointKind, RooflinePoint

    sources: list[tuple[str, Path, PointKind]] = [
        ("baseline", baseline_dir(state.run_dir) / ROOFLINE_FILE, "baseline")
    ]
    sources += [
        (
            f"iterv{h.iteration}",
            iteration_dir(state.run_dir, h.iteration) / f"{CHAMPION_PREFIX}{ROOFLINE_FILE}",
            "champion",
        )
        for h in state.history
    ]
    points = []
    for label, path, kind in sources:
        try:
            roofline = from_data(read_json(path), Roofline)
        except (OSError, ValueError, TypeError):
            continue
        points.append(RooflinePoint.from_roofline(roofline, label, kind))
    return points


def _charts(store, state, base: float | None) -> list[str]:
    """The two pictures of the run, written beside summary.md, and the lines that show them."""
    lines: list[str] = []
    run_dir = Path(state.run_dir)
    points = _roofline_points(state)
    if any(p.flops_per_s is not None or p.bytes_per_s is not None for p in points):
        try:
            from kopt_core.roofline.plot import roofline_chart

            roofline_chart(ceilings_of(state), points, run_dir / SUMMARY_ROOFLINE_CHART, title=_title(state))
            lines += [f"![roofline: baseline and champions]({SUMMARY_ROOFLINE_CHART})", ""]
        except ValueError as exc:  # ceilings without a bandwidth: no roofline can be drawn
            lines += [f"No roofline chart: {exc}", ""]
    if state.history:
        from kopt_core.run.charts import speedup_chart

        speedup_chart(
            _speedup_points(state, base),
            run_dir / SPEEDUP_CHART,
            title=_title(state),
            speedup_note="the promotions' paired speedups chained up to the iteration, times its champion's"
            " paired speedup over the best it was compared with",
            interval_note="of that last paired speedup, scaled by the chain before it",
        )
        lines += [f"![speedup per iteration]({SPEEDUP_CHART})", ""]
    return lines


def _title(state) -> str:
    dims = ", ".join(f"{k}={v}" for k, v in state.dims.items())
    return f"{Path(state.baseline_file).name} ({dims})"


def _iterations(state) -> list[str]:
    """Per iteration: methods, champion, promotion with its interval, attributions, SASS verdicts and
    links to the evidence."""
    from kopt_core.records.loop import read_attribution, read_explore, read_sass_check
    from kopt_core.records.paired import read_paired_comparison

    lines: list[str] = []
    for entry in state.history:
        lines += [f"## Iteration {entry.iteration}", ""]
        lines.append(f"- methods: {', '.join(f'`{m}`' for m in entry.methods) or 'none'}")
        lines.append(f"- champion: {entry.champion or '-'} ({fmt_ms(entry.champion_ms)})")
        if entry.speedup is not None:
            ci = entry.speedup_ci
            interval = f", 95% interval [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
            lines.append(
                f"- paired with the best: {entry.promotion} ({entry.speedup:.3f}x{interval}); promoted: "
                + ("yes" if entry.promoted else "no")
            )
        elif entry.promotion:
            lines.append(f"- paired with the best: {entry.promotion}; promoted: no")
        evidence = {k: Path(state.run_dir) / v for k, v in entry.evidence.items()}
        explore = _read(read_explore, evidence.get("explore"))
        if explore is not None:
            lines += [
                "",
                "| branch | compile | contract | correct | race-safe | timed | median | robust CV | failure"
                " |",
            ]
            lines.append("|---|---|---|---|---|---|---|---|---|")
            for b in explore.branches:
                lines.append(
                    "| "
                    + " | ".join(
                        _cell(c)
                        for c in (
                            b.id + (" (champion)" if b.id == explore.champion else ""),
                            _mark(b.compile_pass),
                            _mark(b.contract_pass),
                            _mark(b.correctness_pass),
                            _mark(b.race_safe),
                            _mark(b.timing_valid),
                            fmt_ms(b.median_ms),
                            "-" if b.robust_cv is None else f"{b.robust_cv:.2%}",
                            b.failure,
                        )
                    )
                    + " |"
                )
            champion = next((b for b in explore.branches if b.id == explore.champion), None)
            if champion is not None and champion.race_note:
                # an unknown race-safe deserves its reason beside the table (a check cut off at the limit)
                lines += ["", f"- the champion's race check: {champion.race_note}"]
        attribution = _read(read_attribution, evidence.get("attribution"))
        sass = _read(read_sass_check, evidence.get("sass_check"))
        classes = {
            **{m: "effective" for m in entry.methods_effective},
            **{m: "ineffective" for m in entry.methods_ineffective},
            **{m: "implementation failed" for m in entry.methods_implementation_failed},
            **{m: "unverified" for m in entry.methods_unverified},
        }
        if attribution is not None or sass is not None:
            lines += [
                "",
                "| method | saves (ms, 95% interval) | beyond noise | SASS | verdict |",
                "|---|---|---|---|---|",
            ]
            for method in entry.methods:
                a = attribution.get(method) if attribution is not None else None
                v = sass.get(method) if sass is not None else None
                saves = (
                    f"{a.attribution_ms:+.5f} [{a.ci_low_ms:+.5f}, {a.ci_high_ms:+.5f}]"
                    if a is not None and a.attribution_ms is not None and a.ci_low_ms is not None
                    else (f"inconclusive: {a.reason}" if a is not None else "-")
                )
                sass_text = "-" if v is None else v.status + (" (strong)" if v.strong else "")
                lines.append(
                    "| "
                    + " | ".join(
                        _cell(c)
                        for c in (
                            method,
                            saves,
                            _mark(a.beyond_noise if a is not None else None),
                            sass_text,
                            classes.get(method, "-"),
                        )
                    )
                    + " |"
                )
        promotion = _read(read_paired_comparison, evidence.get("paired"))
        if promotion is not None and promotion.reasons:
            lines += ["", f"Promotion: {promotion.reasons[0]}"]
        if entry.evidence:
            links = ", ".join(f"[{k}]({v})" for k, v in sorted(entry.evidence.items()))
            lines += ["", f"Evidence: {links}"]
        lines.append("")
    return lines


def _read(reader, path):
    if path is None:
        return None
    try:
        return reader(path)
    except (OSError, ValueError):
        return None


def _mark(value) -> str:
    return {True: "yes", False: "no", None: "-"}[value]

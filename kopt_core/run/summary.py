"""summary.md: what a run did, in plain Markdown (step 4 of a run, and every stopped run)."""

from __future__ import annotations

import math
from pathlib import Path

from kopt_core.jsonio import write_text_atomic
from kopt_core.records import read_bench_result
from kopt_core.run.layout import baseline_dir


def baseline_ms(run_dir: str | Path) -> float | None:
    """The baseline's median kernel time from baseline/bench.json, or None before the baseline was seeded."""
    try:
        timing = read_bench_result(baseline_dir(run_dir) / "bench.json").kernel_timing
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
        lines.append(f"- speedup over the baseline: {base / state.best_metric_ms:.3f}x")
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

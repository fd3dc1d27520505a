"""``kopt select``: the deterministic priority scan over a profile's evidence, written as methods.json
and analysis.md (from references/templates/iteration_report.md)."""

from __future__ import annotations

from pathlib import Path

from kopt_core.errors import ConfigError
from kopt_core.jsonio import read_json, write_json, write_text_atomic
from kopt_core.knowledge.evidence import floor_share, roofline_evidence
from kopt_core.knowledge.methods import load_methods
from kopt_core.knowledge.select import (
    ProfileEvidence,
    Selection,
    SelectionContext,
    kernel_tags,
    select_methods,
)
from kopt_core.records import from_data, to_data
from kopt_core.refdata import packaged_text
from kopt_core.roofline.records import NcuTop, Roofline


def read_evidence(roofline_path: str | Path, ncu_top_path: str | Path) -> tuple[Roofline, NcuTop]:
    try:
        roofline = from_data(read_json(roofline_path), Roofline)
        ncu_top = from_data(read_json(ncu_top_path), NcuTop)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(
            f"cannot read the profile's evidence ({roofline_path}, {ncu_top_path}): {exc}",
            hint="write them with kopt profile (or kopt iter open)",
        ) from None
    if not ncu_top.values:
        raise ConfigError(f"{ncu_top_path} has no metric values: profile again with this kopt")
    return roofline, ncu_top


def select_from_evidence(
    roofline: Roofline, ncu_top: NcuTop, *, sass_mnemonics: list[str] | None = None, **context
) -> Selection:
    """The scan on one profile; ``context`` holds the other fields of a ``SelectionContext``."""
    evidence = ProfileEvidence(
        budget=dict(roofline.axis_budget),
        bound=roofline.bound,
        values={**ncu_top.values, **roofline_evidence(roofline, ncu_top.values)},
        floor_share=floor_share(roofline),
        tags=kernel_tags(sass_mnemonics, kernels=ncu_top.kernels),
    )
    return select_methods(load_methods(), SelectionContext(evidence=evidence, **context))


def _lines(rows: list[str]) -> str:
    return "\n".join(f"- {row}" for row in rows) or "- none"


def render_analysis(
    selection: Selection, roofline: Roofline, ncu_top: NcuTop, kernel: str, notes: list[str]
) -> str:
    template, _ = packaged_text("templates/iteration_report.md")
    top = [m.evidence for axis in ("compute", "memory", "latency") for m in ncu_top.axes.get(axis, ())]

    def gap(value):
        return "unknown" if value is None else f"{value:.3f}"

    return template.format(
        iteration=selection.iteration,
        kernel=kernel,
        label=roofline.label,
        bound=roofline.bound,
        delta_compute=gap(roofline.delta_compute),
        delta_memory=gap(roofline.delta_memory),
        delta_latency=gap(roofline.delta_latency),
        axis_budget=", ".join(f"{k} {v}" for k, v in selection.budget.items()),
        floor_share="unknown (no workload roofline)"
        if selection.floor_share is None
        else f"{selection.floor_share:.3f}",
        top_metrics=_lines(top),
        selected=_lines(
            [
                f"`{p.id}` ({p.axis}, priority {p.priority}, {p.numerics}): {p.evidence}; card "
                f"`{p.id}` in references/optimization_catalog.md"
                for p in selection.selected
            ]
        ),
        skipped=_lines([f"`{s.id}` ({s.axis}): {s.reason}" for s in selection.skipped]),
        underfilled=_lines([f"{axis}: {why}" for axis, why in selection.underfilled.items()]),
        notes=_lines(notes),
    )


def write_selection(out_dir: str | Path, selection: Selection, analysis: str) -> Path:
    out = Path(out_dir)
    write_json(out / "methods.json", to_data(selection))
    write_text_atomic(out / "analysis.md", analysis)
    return out / "methods.json"


def read_traits(
    sass_path: str | Path | None = None, *, profile_dir: str | Path | None = None
) -> tuple[list[str] | None, str]:
    """The kernel's SASS mnemonics (for kernel_has / kernel_lacks skip conditions) and a note saying
    where they came from: ``sass_path`` when given, else the listing the profile in ``profile_dir`` kept
    (its profile.json names it). None when there is none: those skip conditions are then not applied."""
    from kopt_core.records import read_profile_summary
    from kopt_core.sass import parse_sass

    if sass_path is None and profile_dir is not None:
        summary = Path(profile_dir) / "profile.json"
        kept = read_profile_summary(summary).sass if summary.is_file() else None
        if kept is None or not kept.file:
            why = (kept and kept.error) or f"{summary} names no SASS listing"
            return None, f"kernel traits not read ({why}): kernel_has / kernel_lacks skips not applied"
        sass_path = Path(profile_dir) / kept.file
    if sass_path is None:
        return None, "kernel traits not read (no SASS given): kernel_has / kernel_lacks skips not applied"
    try:
        listing = parse_sass(Path(sass_path).read_text(errors="replace"))
    except OSError as exc:
        raise ConfigError(f"cannot read the SASS listing {sass_path}: {exc}") from None
    if listing.empty:
        return (
            None,
            f"kernel traits not read ({sass_path} has no instructions): kernel_has / kernel_lacks "
            "skips not applied",
        )
    return list(listing.instructions), f"kernel traits read from {sass_path}"


def select_standalone(
    roofline_path: str | Path,
    ncu_top_path: str | Path,
    *,
    arch: str,
    backend: str,
    numerics_mode: str = "reference",
    dtypes: tuple[str, ...] = (),
    sass_path: str | Path | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """``kopt select --roofline R --ncu-top T``: the scan on any profile, without a run's history. The
    kernel's traits (shared-memory staging, MMA instructions...) come from ``sass_path``, else from the
    SASS listing kopt profile kept beside roofline.json."""
    roofline, ncu_top = read_evidence(roofline_path, ncu_top_path)
    mnemonics, traits = read_traits(sass_path, profile_dir=Path(roofline_path).parent)
    selection = select_from_evidence(
        roofline,
        ncu_top,
        arch=arch,
        backend=backend,
        numerics_mode=numerics_mode,
        dtypes=tuple(dtypes),
        sass_mnemonics=mnemonics,
    )
    analysis = render_analysis(
        selection,
        roofline,
        ncu_top,
        str(roofline_path),
        [f"standalone selection: no method history; {traits}"],
    )
    return write_selection(Path(out_dir or Path(roofline_path).parent), selection, analysis)

"""``kopt select``: the deterministic priority scan over a profile's evidence, or an agent's own choice
checked against the hard constraints beside it, written as methods.json and analysis.md (from
references/templates/iteration_report.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from kopt_core.bench.buffers import FLOAT_DTYPES
from kopt_core.contract import INTEGER_SCALARS
from kopt_core.errors import ConfigError
from kopt_core.hardware import parse_arch
from kopt_core.jsonio import write_json, write_text_atomic
from kopt_core.knowledge.evidence import KernelFacts, derived_evidence, floor_share, work_kind
from kopt_core.knowledge.headroom import rebudget
from kopt_core.knowledge.methods import load_methods
from kopt_core.knowledge.select import (
    TAG_PATTERNS,
    Choice,
    ProfileEvidence,
    Selection,
    SelectionContext,
    axis_slots,
    kernel_tags,
    select_methods,
    validate_choice,
)
from kopt_core.ncu.metrics import load_registry, without_eventless_zeros
from kopt_core.records import to_data
from kopt_core.records.roofline import NcuTop, Roofline
from kopt_core.records.versions import SELECTION_KIND, read_document
from kopt_core.refdata import packaged_text
from kopt_core.steps.profile import PROFILE_FILE

R = TypeVar("R", Roofline, NcuTop)

# What a selection writes into its folder (iterv{i}/ in a run): the selection and its explanation.
METHODS_FILE = "methods.json"
ANALYSIS_FILE = "analysis.md"


# The dtype names a kernel's operands may have (torch's, and tf32 for matmul math).
KNOWN_DTYPES = (*FLOAT_DTYPES, *INTEGER_SCALARS, "bool", "tf32")


def _read_profile_document(path: str | Path, cls: type[R], kind: str) -> R:
    """``path`` as the ``kind`` document kopt profile writes (roofline.json, ncu_top.json); a missing,
    unreadable or wrongly shaped file is a ConfigError (exit 4) naming the file and the first bad field."""
    what = f"a {kind}.json written by kopt profile"
    try:
        return read_document(path, cls, kind)
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror or exc}): expected {what}") from None
    except ValueError as exc:  # no JSON, no object, a newer schema, or a field of the wrong shape
        text = str(exc)
        prefix = f"{path} is not a {kind} document: "
        if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            why = f"it is not JSON text ({text})"
        elif text.startswith(prefix):
            fields = text[len(prefix) :].split("; ")
            more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
            why = f"{fields[0]}{more}"
        elif text.startswith(f"{path} "):
            why = f"it {text[len(f'{path} ') :]}"
        else:
            why = text
        raise ConfigError(f"{path} is not {what}: {why}") from None


def read_ncu_top(path: str | Path) -> NcuTop:
    """An ncu_top.json kopt profile wrote; a missing or wrongly shaped one is a ConfigError (exit 4)."""
    return _read_profile_document(path, NcuTop, "ncu_top")


def read_evidence(roofline_path: str | Path, ncu_top_path: str | Path) -> tuple[Roofline, NcuTop]:
    roofline = _read_profile_document(roofline_path, Roofline, "roofline")
    ncu_top = _read_profile_document(ncu_top_path, NcuTop, "ncu_top")
    if not ncu_top.values:
        raise ConfigError(f"{ncu_top_path} has no metric values: profile again with this kopt")
    return roofline, ncu_top


def check_standalone_options(
    arch: str, backend: str, dtypes: tuple[str, ...], *, installed_backends: tuple[str, ...] = ()
) -> str:
    """The ``--arch`` nvcc spelling after checking ``arch``, ``backend`` and ``dtypes`` against what the
    method registry knows; an unknown one is a ConfigError (exit 4) naming the option."""
    registry = load_methods()
    arch = parse_arch(arch)
    if arch not in registry.architectures:
        raise ConfigError(
            f"--arch {arch}: the method registry knows no such architecture; expected one of "
            f"{', '.join(registry.architectures)}"
        )
    backends = sorted({b for m in registry.methods for b in m.backends} | set(installed_backends))
    if backend not in backends:
        raise ConfigError(
            f"--backend {backend!r} is not a kopt backend; expected one of {', '.join(backends)}"
        )
    for dtype in dtypes:
        if dtype not in KNOWN_DTYPES:
            raise ConfigError(
                f"--dtype {dtype!r} is not a dtype name; expected one of {', '.join(KNOWN_DTYPES)}"
            )
    return arch


NO_METHODS = "none"  # ``--methods none``: the agent chooses no method (a hyperparameter-only iteration)


def choice_of(methods: tuple[str, ...], why: str | None) -> Choice | None:
    """An agent's choice from ``--methods`` and ``--why``; None (the scan chooses) when no method is
    given; ``--methods none`` alone chooses no method. A reason without methods is a ConfigError: it
    would explain nothing."""
    if tuple(m.lower() for m in methods) == (NO_METHODS,):
        return Choice(methods=(), why=why)
    if NO_METHODS in (m.lower() for m in methods):
        raise ConfigError(f"--methods {','.join(methods)}: 'none' chooses no method; give it alone")
    if methods:
        return Choice(methods=methods, why=why)
    if why is not None:
        raise ConfigError("--why explains a choice of methods: give --methods with it, or neither")
    return None


def select_from_evidence(
    roofline: Roofline,
    ncu_top: NcuTop,
    *,
    facts: KernelFacts | None = None,
    choice: Choice | None = None,
    **context: Any,
) -> Selection:
    """The scan on one profile, or ``choice`` checked against the hard constraints beside the scan's
    picks (ChoiceRejected, a ConfigError, names every one it breaks). ``facts`` is what profile.json
    says about the kernel (``read_kernel_facts``); ``context`` holds the other fields of a
    ``SelectionContext``."""
    facts = facts or KernelFacts()
    kind, kind_why = work_kind(facts)
    share = floor_share(roofline, facts)
    budget, budget_why = rebudget(roofline, share)
    measured = without_eventless_zeros(load_registry(), ncu_top.values)
    evidence = ProfileEvidence(
        budget=budget,
        budget_why=budget_why,
        bound=roofline.bound,
        values={**measured, **derived_evidence(roofline, measured, facts)},
        floor_share=share,
        tags=kernel_tags(facts.mnemonics, kernels=ncu_top.kernels, work_kind=kind),
        work_kind=kind,
        work_kind_why=kind_why,
        bundle=ncu_top.bundle,
    )
    selection_context = SelectionContext(evidence=evidence, **context)
    if choice is None:
        return select_methods(load_methods(), selection_context)
    return validate_choice(load_methods(), selection_context, choice)


def _lines(rows: list[str]) -> str:
    return "\n".join(f"- {row}" for row in rows) or "- none"


def _ids(ids: tuple[str, ...]) -> str:
    return ", ".join(f"`{i}`" for i in ids) or "none"


def who_chose(selection: Selection) -> list[str]:
    """analysis.md's words on who chose the methods and, for an agent, why and how its choice departs
    from the scan's picks on the same evidence."""
    if selection.chosen_by == "scan":
        return ["the budget-aware priority scan (docs/loop.md): its picks are the methods selected below"]
    if selection.chosen_by == "search":
        return [
            "no method: the search generator tunes the kernel's declared parameters and implements nothing "
            "new, so its branches claim no method and need no ablation",
            f"the scan's own picks on this evidence, advice for a generator that writes code: "
            f"{_ids(selection.scan_ids)}",
        ]
    rows = [
        'an agent, overruling the scan where they differ (docs/loop.md, "Choosing methods yourself"); '
        "the choice passed every hard constraint",
        f"why, in the agent's words: {selection.why}",
        f"the agent's methods: {_ids(selection.ids)}",
        f"the scan's own picks on this evidence: {_ids(selection.scan_ids)}",
    ]
    skipped = {s.id: s.reason for s in selection.skipped}
    for picked in selection.selected:
        if picked.id in selection.scan_ids:
            rows.append(f"`{picked.id}`: the scan picked it too")
        elif picked.id in skipped:
            rows.append(f"`{picked.id}`: chosen although the scan skipped it: {skipped[picked.id]}")
        else:
            rows.append(
                f"`{picked.id}`: chosen on the {picked.axis} axis, which the scan did not scan: its budget "
                f"is {selection.budget.get(picked.axis, 0)}"
            )
    rows += [
        f"`{method}`: the scan's pick, left out by the agent"
        for method in selection.scan_ids
        if method not in selection.ids
    ]
    for axis, slots in selection.budget.items():
        taken = sum(1 for p in selection.selected if p.axis == axis)
        if taken != axis_slots(selection.budget, axis):
            rows.append(f"{axis}: {taken} method(s) chosen against its budget of {slots}")
    return rows


def missing_sass_note(selection: Selection) -> str | None:
    """What a selection made without the kernel's SASS listing must say (None when the listing was read):
    the kernel's traits were unknown, so no kernel_has / kernel_lacks skip condition on them was applied,
    and which ranked methods that concerned (``Selection.unapplied_skips``)."""
    if any(selection.kernel_tags.get(tag) is not None for tag in TAG_PATTERNS):
        return None
    note = (
        "the kernel's SASS listing was missing, so its traits (shared-memory staging, MMA, TMA, ...) are "
        "unknown and no kernel_has / kernel_lacks skip condition on them was applied"
    )
    affected = selection.unapplied_skips
    if affected is None:
        note += "; which methods' ranking that affected was not recorded (methods.json before schema 3)"
    elif affected:
        listed = "; ".join(f"{method} (unknown: {', '.join(traits)})" for method, traits in affected.items())
        note += f"; the ranking of these methods rests on that, any of them might have been skipped: {listed}"
    else:
        note += "; no ranked method had such a condition, so the picks are the same as with a listing"
    return note + " (give the listing with --sass, or profile with a backend that disassembles the kernel)"


def selection_notes(methods_path: str | Path) -> list[str]:
    """What a person or a script must be told about the selection in ``methods_path`` (methods.json)
    besides its picks: today, that it was made without the kernel's SASS listing."""
    selection = read_document(methods_path, Selection, SELECTION_KIND)
    note = missing_sass_note(selection)
    return [note] if note else []


def render_analysis(
    selection: Selection, roofline: Roofline, ncu_top: NcuTop, kernel: str, notes: list[str]
) -> str:
    template, _ = packaged_text("templates/iteration_report.md")
    top = [m.evidence for axis in ("compute", "memory", "latency") for m in ncu_top.axes.get(axis, ())]

    def gap(value: float | None) -> str:
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
        chosen_by=_lines(who_chose(selection)),
        selected=_lines(
            [
                f"`{p.id}` ({p.axis}, priority {p.priority}, {p.numerics}): {p.evidence}; "
                f"{p.headroom_why or 'headroom not recorded'}; card `{p.id}` in "
                "references/optimization_catalog.md"
                for p in selection.selected
            ]
        ),
        skipped=_lines([f"`{s.id}` ({s.axis}): {s.reason}" for s in selection.skipped]),
        underfilled=_lines([f"{axis}: {why}" for axis, why in selection.underfilled.items()]),
        notes=_lines(
            [
                f"kind of work: {selection.work_kind} ({selection.work_kind_why or 'not read'})",
                *([f"axis budget: {selection.budget_why}"] if selection.budget_why else []),
                *notes,
                *filter(None, [missing_sass_note(selection)]),
            ]
        ),
    )


def write_selection(out_dir: str | Path, selection: Selection, analysis: str) -> Path:
    out = Path(out_dir)
    write_json(out / METHODS_FILE, to_data(selection))
    write_text_atomic(out / ANALYSIS_FILE, analysis)
    return out / METHODS_FILE


def read_kernel_facts(
    profile_dir: str | Path | None = None, *, sass_path: str | Path | None = None
) -> tuple[KernelFacts, list[str]]:
    """What the profile in ``profile_dir`` recorded about the kernel (profile.json: its launches, buffers,
    workload model and dims; the SASS listing it kept, or ``sass_path`` when given), and notes saying
    what was read and what was not. A missing or unreadable profile.json leaves those facts unknown."""
    from kopt_core.records import read_profile_summary

    notes: list[str] = []
    summary = None
    kept_sass: Path | None = None
    if profile_dir is not None:
        path = Path(profile_dir) / PROFILE_FILE
        if not path.is_file():
            notes.append(f"no {path}: launches, buffers and workload model unknown")
        else:
            try:
                summary = read_profile_summary(path)
            except (OSError, ValueError) as exc:
                notes.append(f"{path} not read ({exc}): launches, buffers and workload model unknown")
    if summary is not None:
        notes.append(
            f"profile.json: {len(summary.kernels)} launch(es), {len(summary.buffers)} buffer(s), workload "
            + (
                f"from the {summary.workload.source} ({summary.workload.note})"
                if summary.workload
                else "unknown"
            )
        )
        if sass_path is None and summary.sass is not None and summary.sass.file:
            kept_sass = Path(str(profile_dir)) / summary.sass.file
    mnemonics, traits = _read_mnemonics(
        Path(sass_path) if sass_path is not None else kept_sass,
        why_none=(summary.sass.error if summary and summary.sass and summary.sass.error else None)
        or ("profile.json names no SASS listing" if summary is not None else "no SASS given"),
    )
    notes.append(traits)
    facts = KernelFacts(
        kernels=summary.kernels if summary else (),
        buffers=summary.buffers if summary else (),
        workload=summary.workload if summary else None,
        dims=dict(summary.dims or {}) if summary else {},
        mnemonics=mnemonics,
    )
    return facts, notes


def _read_mnemonics(sass_path: Path | None, *, why_none: str) -> tuple[tuple[str, ...] | None, str]:
    from kopt_core.sass import parse_sass

    skipped = "kernel_has / kernel_lacks skips not applied"
    if sass_path is None:
        return None, f"kernel traits not read ({why_none}): {skipped}"
    try:
        listing = parse_sass(sass_path.read_text(errors="replace"))
    except OSError as exc:
        raise ConfigError(f"cannot read the SASS listing {sass_path}: {exc}") from None
    if listing.empty:
        return None, f"kernel traits not read ({sass_path} has no instructions): {skipped}"
    return tuple(listing.instructions), f"kernel traits read from {sass_path}"


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
    installed_backends: tuple[str, ...] = (),
    method_backends: tuple[str, ...] = (),
    methods: tuple[str, ...] = (),
    why: str | None = None,
) -> Path:
    """``kopt select --roofline R --ncu-top T``: the scan on any profile, without a run's history. The
    kernel's traits (shared-memory staging, MMA instructions...) come from ``sass_path``, else from the
    SASS listing kopt profile kept beside roofline.json. ``installed_backends`` are accepted as
    ``backend`` besides those the method registry names; ``method_backends`` are other backends whose
    methods ``backend`` takes (``kopt_core.steps.backends.method_backends``). With ``methods`` (and
    ``why``, then required) those methods are selected when they pass the hard constraints, beside the
    scan's own picks; a refused choice writes nothing."""
    choice = choice_of(tuple(methods), why)
    arch = check_standalone_options(arch, backend, tuple(dtypes), installed_backends=installed_backends)
    roofline, ncu_top = read_evidence(roofline_path, ncu_top_path)
    facts, notes = read_kernel_facts(Path(roofline_path).parent, sass_path=sass_path)
    if not dtypes and facts.input_dtypes:
        dtypes = facts.input_dtypes
        notes.append(f"operand dtypes from profile.json's buffers: {', '.join(dtypes)}")
    selection = select_from_evidence(
        roofline,
        ncu_top,
        arch=arch,
        backend=backend,
        method_backends=method_backends,
        numerics_mode=numerics_mode,
        dtypes=tuple(dtypes),
        facts=facts,
        choice=choice,
    )
    analysis = render_analysis(
        selection,
        roofline,
        ncu_top,
        str(roofline_path),
        ["standalone selection: no method history", *notes],
    )
    return write_selection(standalone_out_dir(roofline_path, out_dir), selection, analysis)


def standalone_out_dir(roofline_path: str | Path, out_dir: str | Path | None = None) -> Path:
    """Where ``select_standalone`` writes methods.json and analysis.md: ``out_dir``, else beside
    roofline.json."""
    return Path(out_dir or Path(roofline_path).parent)

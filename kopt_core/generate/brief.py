"""The iteration's brief: ``iterv{i}/brief.md`` for whoever writes the candidates (an engineer, a coding
agent, a script) and ``iterv{i}/brief.json`` with the same facts as data.

It is written before every generator runs, from what the earlier steps left on disk and nothing
recomputed: the best kernel (state.json, its contract from baseline/bench.json), where it stands
(iterv{i}/roofline.json), its top ncu metrics (ncu_top.json), the selected methods (methods.json) with
their cards (references/optimization_catalog.md), the files to write, the rules the seed sets for
branches, a filled-in candidates.json, and the command that continues the run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from attrs import field, frozen

from kopt_core.errors import ConfigError
from kopt_core.jsonio import read_json, write_json, write_text_atomic
from kopt_core.records import from_data, read_bench_result, to_data
from kopt_core.records.bench import BufferReport, Tolerance
from kopt_core.records.fields import as_tuple
from kopt_core.records.generate import GenerationContext
from kopt_core.records.kernel import Param
from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
from kopt_core.records.profile import ProfileSummary
from kopt_core.records.roofline import AXES, NcuTop, Roofline, TopMetric
from kopt_core.records.state import HistoryEntry, State
from kopt_core.records.versions import BRIEF_SCHEMA_VERSION, SELECTION_KIND, read_document
from kopt_core.refdata import packaged_text
from kopt_core.run.layout import (
    ANALYSIS_FILE,
    BENCH_FILE,
    BEST_INPUT,
    METHODS_FILE,
    NCU_TOP_FILE,
    PROFILE_FILE,
    ROOFLINE_FILE,
    baseline_dir,
    report_file,
    sass_file,
)

# Below this headroom for every pick, brief.md suggests a hyperparameter-only iteration (--methods none).
LOW_HEADROOM = 0.10
CATALOG_FILE = "optimization_catalog.md"
SOURCE_INLINE_CHARS = 60_000  # a longer best kernel is named, not copied into brief.md
EVIDENCE_FILES = (
    ROOFLINE_FILE,
    NCU_TOP_FILE,
    PROFILE_FILE,
    METHODS_FILE,
    ANALYSIS_FILE,
    report_file(BEST_INPUT),
    sass_file(BEST_INPUT),
)
# Example hyperparameters for the filled-in candidates.json: only the shape matters, the values are the
# writer's to choose.
EXAMPLE_TILES = ((128, 4), (256, 4), (128, 8), (256, 8), (64, 4), (512, 8), (64, 2), (512, 4))


# -------------------------------------------------------------------------------------------- the record


@frozen
class Contract:
    """The best kernel's interface as the backend's preflight parsed it at seed time (it never changes
    during a run: every candidate keeps it)."""

    entry: str
    signature: str  # "solve(x: const float*, y: float*, N: int)"
    params: tuple[Param, ...] = field(converter=as_tuple)
    buffers: tuple[BufferReport, ...] = field(default=(), converter=as_tuple)
    tolerance: Tolerance | None = None
    source: str = ""  # the document it was read from, relative to the run folder


@frozen
class BestKernel:
    path: str  # absolute
    relative: str  # relative to the run folder when inside it
    median_ms: float | None  # state.json's best_metric_ms
    dims: dict[str, Any] = field(factory=dict)
    contract: Contract | None = None  # None: no readable baseline/bench.json


@frozen
class RooflineSummary:
    """roofline.json's verdict without its ceilings' measurement details."""

    label: str
    bound: str
    near_peak: bool
    delta_compute: float | None
    delta_memory: float | None
    delta_latency: float | None
    axis_budget: dict[str, int]
    floor_ms: float | None = None
    duration_ms: float | None = None
    reasons: tuple[str, ...] = field(default=(), converter=as_tuple)


@frozen
class BriefMethod:
    id: str
    axis: str
    name: str
    priority: int | None
    numerics: str
    summary: str  # the registry's one line
    evidence: str  # why it was selected (methods.json)
    card: str  # its card in references/optimization_catalog.md, without the heading
    headroom: float | None = None  # the share of the kernel's time the evidence says it can unlock
    headroom_why: str = ""  # the reading it came from (methods.json)


@frozen
class FilesToWrite:
    """Relative to the iteration folder."""

    branches: tuple[str, ...] = field(converter=as_tuple)
    ablations: dict[str, str]  # method -> file
    candidates: str


@frozen
class Learnt:
    """What earlier iterations of the run established about methods."""

    effective: tuple[str, ...] = field(default=(), converter=as_tuple)
    ineffective: tuple[str, ...] = field(default=(), converter=as_tuple)
    implementation_failed: tuple[str, ...] = field(default=(), converter=as_tuple)
    unverified: tuple[str, ...] = field(default=(), converter=as_tuple)
    iterations: tuple[str, ...] = field(default=(), converter=as_tuple)  # one line per closed iteration


@frozen
class BriefKernel:
    """One kernel of the profiled program, as profile.json lists its launches: a PyTorch forward, or a
    solve that launches several kernels, is more than one."""

    name: str
    launches: int
    duration_ms: float | None  # the sum over its launches (ncu's gpu__time_duration)
    share: float | None  # of the program's summed duration


MAX_KERNELS_SHOWN = 20


@frozen
class Brief:
    """brief.json: everything brief.md says, as data."""

    iteration: int
    run_dir: str
    iteration_dir: str
    generator: str
    backend: str
    suffix: str
    k: int
    best: BestKernel
    roofline: RooflineSummary
    ncu_bundle: str
    top_metrics: dict[str, tuple[TopMetric, ...]]
    methods: tuple[BriefMethod, ...] = field(converter=as_tuple)
    chosen_by: str  # scan | agent
    why: str | None  # the agent's reason when it chose the methods
    numerics_mode: str
    files: FilesToWrite
    example: Candidates  # a filled-in candidates.json for exactly these files
    rules: tuple[str, ...] = field(converter=as_tuple)
    learnt: Learnt
    evidence: dict[str, str]  # document -> path relative to the iteration folder
    resume: str  # the command that continues the run
    kernels: tuple[BriefKernel, ...] = field(default=(), converter=as_tuple)  # profile.json's, by time
    schema_version: int = BRIEF_SCHEMA_VERSION


# ----------------------------------------------------------------------------------------------- reading


def _read(path: Path, cls: type, kind: str, step: str) -> Any:
    try:
        return read_document(path, cls, kind)
    except OSError as exc:
        raise ConfigError(
            f"cannot read {path} ({exc.strerror or exc}): the brief is written from it",
            hint=f"no evidence, no generation: run {step} first",
        ) from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}", hint=f"run {step} again") from None


def _relative(path: str | Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _contract(state: State) -> Contract | None:
    """From baseline/bench.json: the build's interface (the backend's preflight parse) and the buffers."""
    bench_path = baseline_dir(state.run_dir) / BENCH_FILE
    try:
        bench = read_bench_result(bench_path)
    except (OSError, ValueError):
        return None
    interface = bench.build.interface if bench.build is not None else None
    if interface is None:
        return None
    params = ", ".join(f"{p.name}: {p.ctype}" for p in interface.params)
    return Contract(
        entry=interface.entry,
        signature=f"{interface.entry}({params})",
        params=interface.params,
        buffers=bench.buffers,
        tolerance=bench.tolerance,
        source=_relative(bench_path, Path(state.run_dir)),
    )


def _best(state: State) -> BestKernel:
    run_dir = Path(state.run_dir)
    return BestKernel(
        path=str(state.best_file),
        relative=_relative(state.best_file, run_dir),
        median_ms=state.best_metric_ms,
        dims=dict(state.dims),
        contract=_contract(state),
    )


def _roofline(roofline: Roofline) -> RooflineSummary:
    return RooflineSummary(
        label=roofline.label,
        bound=roofline.bound,
        near_peak=roofline.near_peak,
        delta_compute=roofline.delta_compute,
        delta_memory=roofline.delta_memory,
        delta_latency=roofline.delta_latency,
        axis_budget=dict(roofline.axis_budget),
        floor_ms=roofline.floor_ms,
        duration_ms=roofline.duration_ms,
        reasons=roofline.reasons,
    )


def _kernels(folder: Path) -> tuple[BriefKernel, ...]:
    """The profiled program's kernels, by name, longest first, with their share of its time; () when the
    profile holds one kernel or cannot be read (it is evidence, not a requirement of the brief)."""
    try:
        profile = from_data(read_json(folder / PROFILE_FILE), ProfileSummary)
    except (OSError, ValueError, TypeError, KeyError):
        return ()
    if len(profile.kernels) < 2:
        return ()
    totals: dict[str, list[float | None]] = {}
    for kernel in profile.kernels:
        totals.setdefault(kernel.name, []).append(kernel.duration_ms)
    whole = sum(d for durations in totals.values() for d in durations if d is not None)
    rows = []
    for name, durations in totals.items():
        known_ms = [d for d in durations if d is not None]
        total = sum(known_ms) if len(known_ms) == len(durations) else None
        rows.append(
            BriefKernel(name, len(durations), total, total / whole if total is not None and whole else None)
        )
    return tuple(sorted(rows, key=lambda k: -(k.duration_ms or 0.0)))


def catalog_cards() -> dict[str, str]:
    """Each method's card in references/optimization_catalog.md (``### <id> — <name>`` up to the next
    heading), keyed by method id, without its heading line."""
    text, _ = packaged_text(CATALOG_FILE)
    cards: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("### "):
            method_id = line[4:].split(" ", 1)[0]
            current = cards.setdefault(method_id, [])
        elif line.startswith("## ") or line.startswith("# "):
            current = None
        elif current is not None:
            current.append(line)
    return {method_id: "\n".join(lines).strip() for method_id, lines in cards.items()}


def _methods(folder: Path, methods: tuple[str, ...]) -> tuple[tuple[BriefMethod, ...], str, str | None, str]:
    """(the methods with their cards, chosen_by, why, numerics_mode) from methods.json."""
    from kopt_core.knowledge.methods import load_methods
    from kopt_core.knowledge.select import Selection

    path = folder / METHODS_FILE
    selection = read_document(path, Selection, SELECTION_KIND, what=str(path), hint="run kopt select again")
    picked = {p.id: p for p in selection.selected}
    registry = load_methods()
    cards = catalog_cards()
    found = []
    for method_id in methods:
        method = registry.get(method_id)
        pick = picked.get(method_id)
        found.append(
            BriefMethod(
                id=method_id,
                axis=method.axis if method else method_id.partition(".")[0],
                name=method.name if method else method_id.partition(".")[2],
                priority=method.priority if method else None,
                numerics=method.numerics if method else "unknown",
                summary=method.summary if method else "not in the method registry",
                evidence=pick.evidence if pick else "",
                card=cards.get(method_id, "no card in references/optimization_catalog.md"),
                headroom=pick.headroom if pick else None,
                headroom_why=pick.headroom_why if pick else "",
            )
        )
    return tuple(found), selection.chosen_by, selection.why, selection.numerics_mode


def _history_line(entry: HistoryEntry) -> str:
    methods = ", ".join(entry.methods) or "no methods"
    if entry.champion is None:
        return f"iteration {entry.iteration}: {methods}; no branch passed"
    champion = f"champion {entry.champion}" + (
        f" {entry.champion_ms:.4g} ms" if entry.champion_ms is not None else ""
    )
    promotion = "promoted" if entry.promoted else f"not promoted ({entry.promotion or 'no verdict'})"
    speedup = f", x{entry.speedup:.3g}" if entry.speedup is not None else ""
    return f"iteration {entry.iteration}: {methods}; {champion}; {promotion}{speedup}"


def _learnt(state: State) -> Learnt:
    return Learnt(
        effective=state.effective_methods,
        ineffective=state.ineffective_methods,
        implementation_failed=state.implementation_failed_methods,
        unverified=state.unverified_methods,
        iterations=tuple(_history_line(entry) for entry in state.history),
    )


# --------------------------------------------------------------------------------------- what to write


def _files(context: GenerationContext) -> FilesToWrite:
    return FilesToWrite(
        branches=tuple(context.branch_file(n) for n in range(1, context.k + 1)),
        ablations={method: context.ablation_file(method) for method in context.methods},
        candidates=context.candidates_file.name,
    )


def example_candidates(context: GenerationContext) -> Candidates:
    """A candidates.json that the loader accepts once its kernel files exist."""
    branches = []
    for n in range(1, context.k + 1):
        block, warps = EXAMPLE_TILES[(n - 1) % len(EXAMPLE_TILES)]
        branches.append(
            BranchSpec(
                id=f"b{n}",
                file=context.branch_file(n),
                methods=context.methods,
                hyperparameters={"BLOCK": block, "num_warps": warps},
                note=f"{block}-wide tile, {warps} warps",
            )
        )
    ablations = tuple(
        AblationSpec(
            method=method,
            file=context.ablation_file(method),
            note=f"b1's design without {method}",
        )
        for method in context.methods
    )
    return Candidates(
        iteration=context.iteration,
        generator=context.generator,
        methods=context.methods,
        branches=tuple(branches),
        ablations=ablations,
    )


def branch_rules(context: GenerationContext, numerics_mode: str) -> tuple[str, ...]:
    """The seed's rules for an iteration's candidates (spec step 3d), and the loader's."""
    methods = ", ".join(context.methods) or "none (no method passed the gates)"
    dims = ", ".join(sorted(context.state.dims)) or "none"
    return (
        f"Every branch implements exactly the selected methods ({methods}): the same combination in all "
        f"{context.k} branches. Branches differ only in hyperparameters and implementation details: tile "
        "sizes (BLOCK_M, BLOCK_N, BLOCK_K), pipeline stages, warps per block, a variant within a method "
        "(swizzle mode, MMA atom, vector width).",
        "Keep the entry point's signature exactly as the best kernel has it (name, parameters, their order "
        "and types): kopt calls every candidate the same way.",
        f"No new dims or parameters: a kernel reads only the run's dims ({dims}) and its buffers.",
        "No side streams: launch on the stream kopt times; work that escapes onto another stream fails "
        "the timing.",
        "No caching of results between calls: every call computes its outputs from its inputs (kopt "
        "checks again with fresh inputs in the same buffers after timing).",
        f"Results stay within the reference's tolerance (numerics mode {numerics_mode}).",
        f"Each kernel is a whole file in the baseline's language, named kernel{context.suffix} in its own "
        "folder inside the iteration folder (no symbolic link leading out of it).",
        "Each ablation is the design you expect to win with only that method rolled back, everything else "
        "identical; it is written now, before explore picks the champion, so say in its note which "
        "branch it follows.",
        "candidates.json names exactly these files; its methods, and every branch's, are the iteration's.",
    )


def build_brief(context: GenerationContext) -> Brief:
    """The brief of ``context``'s iteration, read from the run folder (ConfigError when the iteration's
    evidence is missing or unreadable)."""
    folder = context.iteration_dir
    roofline: Roofline = _read(folder / ROOFLINE_FILE, Roofline, "roofline", "kopt iter open")
    ncu_top: NcuTop = _read(folder / NCU_TOP_FILE, NcuTop, "ncu_top", "kopt iter open")
    methods, chosen_by, why, numerics_mode = _methods(folder, context.methods)
    return Brief(
        iteration=context.iteration,
        run_dir=str(context.run_dir),
        iteration_dir=str(folder),
        generator=context.generator,
        backend=context.backend,
        suffix=context.suffix,
        k=context.k,
        best=_best(context.state),
        roofline=_roofline(roofline),
        ncu_bundle=ncu_top.bundle,
        top_metrics={axis: tuple(ncu_top.axes.get(axis, ())) for axis in AXES},
        methods=methods,
        chosen_by=chosen_by,
        why=why,
        numerics_mode=numerics_mode,
        files=_files(context),
        example=example_candidates(context),
        rules=branch_rules(context, numerics_mode),
        learnt=_learnt(context.state),
        evidence={name: name for name in EVIDENCE_FILES if os.path.lexists(folder / name)},
        resume=context.resume_command,
        kernels=_kernels(folder),
    )


# -------------------------------------------------------------------------------------------- markdown


def _gap(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}"


def _ms(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.4g} ms"


def _bullets(rows: list[str] | tuple[str, ...], empty: str = "none") -> str:
    return "\n".join(f"- {row}" for row in rows) if rows else f"- {empty}"


def _fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _source_lang(suffix: str) -> str:
    return {".cu": "cuda", ".cuh": "cuda", ".py": "python"}.get(suffix, "")


def _md_header(brief: Brief) -> str:
    n_ablations = len(brief.files.ablations)
    return f"""# Iteration {brief.iteration}: write {brief.k} branches and {n_ablations} ablations

| | |
|---|---|
| run | `{brief.run_dir}` |
| iteration folder | `{brief.iteration_dir}` |
| backend | {brief.backend} (kernel files: `kernel{brief.suffix}`) |
| generator | {brief.generator} |
| continue with | `{brief.resume}` |

## What to do

1. Read this brief: the best kernel, where it stands, the methods to implement and their cards.
2. Write {brief.k} branch kernels and one ablation per method (section *Files to write*), following the
   *Rules*.
3. Write `candidates.json` beside them (section *candidates.json*).
4. Continue the run: `{brief.resume}`. kopt checks candidates.json and every file strictly first; each
   problem is named with its fix (exit 4, the run keeps waiting): fix them and run it again.
"""


def _md_contract(contract: Contract | None) -> str:
    if contract is None:
        return "Contract: not recorded (no readable baseline/bench.json); read it from the source below."
    rows = [f"| `{b.name}` | {b.dtype} | {list(b.realised_shape)} | {b.role} |" for b in contract.buffers]
    table = "| buffer | dtype | shape | role |\n|---|---|---|---|\n" + "\n".join(rows) if rows else ""
    tolerance = (
        f"Tolerance: atol {contract.tolerance.atol:g}, rtol {contract.tolerance.rtol:g} "
        f"({contract.tolerance.source})."
        if contract.tolerance is not None
        else ""
    )
    parts = [f"Contract (from `{contract.source}`): `{contract.signature}`", table, tolerance]
    return "\n\n".join(part for part in parts if part)


def _md_best(brief: Brief) -> str:
    best = brief.best
    dims = ", ".join(f"{name}={value}" for name, value in best.dims.items()) or "none"
    text = f"""## The best kernel

- file: `{best.path}` (`{best.relative}` in the run)
- median: {_ms(best.median_ms)} (state.json `best_metric_ms`)
- dims: {dims}

{_md_contract(best.contract)}
"""
    try:
        source = Path(best.path).read_text(errors="replace")
    except OSError as exc:
        return text + f"\nIts source could not be read here ({exc.strerror or exc}).\n"
    if len(source) > SOURCE_INLINE_CHARS:
        return text + f"\nIts source is {len(source)} characters long: read it at `{best.path}`.\n"
    return text + f"\nIts source:\n\n{_fence(source, _source_lang(brief.suffix))}\n"


def _md_roofline(brief: Brief) -> str:
    r = brief.roofline
    budget = ", ".join(f"{axis} {slots}" for axis, slots in r.axis_budget.items())
    return f"""## Where it stands (roofline.json)

| field | value |
|---|---|
| label | {r.label} |
| bound | {r.bound} |
| near_peak | {str(r.near_peak).lower()} |
| delta_compute (1 - compute utilisation) | {_gap(r.delta_compute)} |
| delta_memory (1 - bandwidth utilisation) | {_gap(r.delta_memory)} |
| delta_latency (largest stall share) | {_gap(r.delta_latency)} |
| axis budget | {budget} |
| roofline floor | {_ms(r.floor_ms)} |
| ncu duration | {_ms(r.duration_ms)} |

{_bullets(r.reasons)}
"""


def _md_kernels(brief: Brief) -> str:
    if not brief.kernels:
        return ""
    rows = [
        f"| `{k.name[:120]}` | {k.launches} | {_ms(k.duration_ms)} | "
        + ("—" if k.share is None else f"{k.share:.0%}")
        + " |"
        for k in brief.kernels[:MAX_KERNELS_SHOWN]
    ]
    more = len(brief.kernels) - MAX_KERNELS_SHOWN
    return (
        "## The program's kernels (profile.json)\n\n"
        "The profiled launch ran these kernels (a PyTorch forward runs one per operator); the share is of "
        "their summed time: fuse or replace the large ones first.\n\n"
        "| kernel | launches | time | share |\n|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
        + (f"\n{more} more kernels: see profile.json.\n" if more > 0 else "")
    )


def _md_metrics(brief: Brief) -> str:
    parts = [f"## Top ncu metrics (ncu_top.json, {brief.ncu_bundle} bundle)\n"]
    for axis in AXES:
        rows = [f"`{m.key}`: {m.evidence}" for m in brief.top_metrics.get(axis, ())]
        parts.append(f"{axis}:\n\n{_bullets(rows)}\n")
    return "\n".join(parts)


def _md_methods(brief: Brief) -> str:
    chooser = (
        f"chosen by an agent: {brief.why}"
        if brief.chosen_by == "agent"
        else "chosen by the budget-aware priority scan"
    )
    head = f"## Methods to implement (methods.json, {chooser})\n\nanalysis.md has the full selection.\n"
    if not brief.methods:
        who = "The agent chose no method" if brief.chosen_by == "agent" else "No method passed the gates"
        return head + (
            f"\n{who}: every branch carries `methods: []`, differs only in hyperparameters, and there are "
            "no ablations.\n"
        )
    cards = [
        f"""### {m.id}

{m.axis} axis, priority {m.priority if m.priority is not None else "unknown"}, {m.numerics}. {m.summary}

Why it was selected: {m.evidence or "not recorded"}

Headroom: {_headroom(m)}

{m.card}
"""
        for m in brief.methods
    ]
    return head + _low_headroom_note(brief) + "\n" + "\n".join(cards)


def _headroom(method: BriefMethod) -> str:
    if method.headroom is None:
        return f"unknown ({method.headroom_why or 'not recorded'})"
    return f"{method.headroom:.2f} of the kernel's time ({method.headroom_why})"


def _low_headroom(methods: tuple[BriefMethod, ...]) -> bool:
    """Every method's headroom is known and below LOW_HEADROOM: the scan's picks can unlock little."""
    return bool(methods) and all(m.headroom is not None and m.headroom < LOW_HEADROOM for m in methods)


def _low_headroom_note(brief: Brief) -> str:
    if brief.chosen_by != "scan" or not _low_headroom(brief.methods):
        return ""
    shares = ", ".join(f"{m.id} {m.headroom:.2f}" for m in brief.methods)
    return (
        f"\n**Little headroom**: the evidence gives every pick less than {LOW_HEADROOM:.0%} of the kernel's "
        f"time ({shares}). If the kernel already has what they would add, choose no method and tune "
        f"hyperparameters instead: `kopt select --state {brief.run_dir} --iter {brief.iteration} --methods "
        'none --why "..."`, then resume once for the new brief (SKILL.md step 4).\n'
    )


def _md_learnt(brief: Brief) -> str:
    learnt = brief.learnt
    return f"""## What earlier iterations learnt

- effective: {", ".join(learnt.effective) or "none"}
- ineffective: {", ".join(learnt.ineffective) or "none"}
- implementation failed: {", ".join(learnt.implementation_failed) or "none"}
- unverified: {", ".join(learnt.unverified) or "none"}

{_bullets(learnt.iterations, "no iteration closed yet")}
"""


def _md_files(brief: Brief) -> str:
    rows = [f"| `{file}` | branch b{n} |" for n, file in enumerate(brief.files.branches, start=1)]
    rows += [f"| `{file}` | `{method}` rolled back |" for method, file in brief.files.ablations.items()]
    rows.append(f"| `{brief.files.candidates}` | the list of them all |")
    table = "\n".join(rows)
    return f"""## Files to write

In `{brief.iteration_dir}`:

| file | what |
|---|---|
{table}
"""


def _md_candidates(brief: Brief) -> str:
    example = json.dumps(to_data(brief.example), indent=2)
    return f"""## candidates.json

| field | value |
|---|---|
| `iteration` | {brief.iteration} |
| `generator` | who wrote the kernels (not empty: your name or your tool's) |
| `methods` | exactly the iteration's methods: {json.dumps(list(brief.example.methods))} |
| `branches` | {brief.k} entries in order, each: `id` (`b1`..`b{brief.k}`), `file`, `methods`, \
`hyperparameters`, `note` |
| `ablations` | one per method, each: `method`, `file`, `note` |
| `schema_version` | 1 |

A branch's `file` is `branches/<id>/kernel{brief.suffix}`, its `methods` the same list as above, its
`hyperparameters` an object saying what this branch chose (tiles, stages, warps, variant). An ablation's
`file` is `ablations/<method>/kernel{brief.suffix}`.

Filled in for this iteration (put each branch's real hyperparameters and notes):

{_fence(example, "json")}

From Python: `kopt_core.run.candidates.write_candidates(iteration_dir, Candidates(...))`.
"""


def render_brief(brief: Brief) -> str:
    """brief.md: readable by an engineer and by a coding agent."""
    evidence = [f"`{path}`" for path in brief.evidence.values()]
    sections = [
        _md_header(brief),
        _md_best(brief),
        _md_roofline(brief),
        _md_kernels(brief),
        _md_metrics(brief),
        _md_methods(brief),
        _md_learnt(brief),
        _md_files(brief),
        "## Rules\n\n" + _bullets(brief.rules) + "\n",
        _md_candidates(brief),
        "## Evidence in the iteration folder\n\n" + _bullets(evidence) + "\n",
        f"## Then\n\nRun `{brief.resume}`: kopt validates the candidates, builds and times every branch, "
        "profiles the champion, pairs each ablation with it and checks its SASS.\n",
    ]
    return "\n".join(sections)


def write_brief(context: GenerationContext) -> Brief:
    """Write ``context.brief_md`` and ``context.brief_json`` (atomically) and return the brief."""
    brief = build_brief(context)
    write_json(context.brief_json, to_data(brief))
    write_text_atomic(context.brief_md, render_brief(brief))
    return brief


__all__ = ["Brief", "build_brief", "catalog_cards", "render_brief", "write_brief"]

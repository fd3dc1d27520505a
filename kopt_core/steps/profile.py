"""``kopt profile``: the evidence the loop decides from.

Profile one invocation of a (validated) kernel with Nsight Compute, read the report through the metric
registry, and write what an engineer or the method selection reads next:

    <out>/<name>.ncu-rep     the report (kept for `ncu-ui`)
    <out>/<name>.raw.csv     ncu --import --csv --page raw   (and .details.csv: ncu's own rule findings)
    <out>/ncu_top.json       the top ncu_num metrics per axis, with the bundle and why
    <out>/roofline.json      the gaps (deltas), bound, near_peak and axis budget (docs/loop.md)
    <out>/roofline.png       the kernel on the roofline (or the gaps, without a workload model)
    <out>/profile.json       attempts, kernels, ncu's time against kopt's, the SASS file, what this cost
    <out>/<name>.sass        the kernel's SASS (the backend's kopt_disassemble), for traits and checks

In a run, ``out_dir = iterv{i}`` and ``name = best_input`` (the iteration's evidence) or ``kernel`` (its
champion, whose JSON files take the prefix ``kernel_`` so that they never replace the evidence the
iteration's methods were selected on).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kopt_core.backends import backend_hooks
from kopt_core.errors import ConfigError, HardwareError, ValidationError
from kopt_core.jsonio import read_json, write_json, write_text_atomic
from kopt_core.ncu import runner
from kopt_core.ncu.metrics import load_registry, resolve
from kopt_core.ncu.parse import attach_findings, parse_details_csv, parse_raw_csv
from kopt_core.records import (
    Artifact,
    BenchOptions,
    BenchResult,
    BufferMoved,
    KernelProfile,
    ProfiledKernel,
    ProfileOptions,
    ProfileReport,
    ProfileSummary,
    SassFile,
    WorkloadUsed,
    from_data,
    to_data,
)
from kopt_core.records.roofline import DEFAULT_CEILINGS, Ceilings, NcuTop, Roofline
from kopt_core.reference import ReferenceModule, load_reference
from kopt_core.roofline.gaps import build_ncu_top, compute_roofline, metric_values
from kopt_core.roofline.model import default_bytes_min, default_memory_floor
from kopt_core.roofline.plot import plot_roofline
from kopt_core.steps.bench import Prepared, prepare, run_bench, static_report

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

# What a profile writes into its folder (the module docstring lists them): the JSON files and the chart
# after a prefix (a run's champion profile takes ``kernel_``), the SASS listing as ``<name>.sass``.
NCU_TOP_FILE = "ncu_top.json"
ROOFLINE_FILE = "roofline.json"
ROOFLINE_CHART = "roofline.png"
PROFILE_FILE = "profile.json"
SASS_SUFFIX = ".sass"

# Before profiling, a short check and timing: no evidence is gathered on a kernel that fails, and the
# median picks the metric bundle.
QUICK = BenchOptions(seeds=(0, 1), budget_s=0.5, time_reference=False)


@attrs.frozen
class ProfileOutcome:
    out_dir: Path
    report: ProfileReport
    ncu_top: NcuTop
    roofline: Roofline
    summary: ProfileSummary


def load_ceilings(path: str | Path | None) -> Ceilings:
    if path is None:
        return DEFAULT_CEILINGS
    try:
        return from_data(read_json(path), Ceilings)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"ceilings file {path} cannot be read: {exc}",
            hint="write it with `python -m kopt_core.roofline.ceilings OUT.json` on the GPU",
        ) from None


def peak_dtype(model: dict[str, Any] | None, inputs: list[tuple[str, int]]) -> str | None:
    """The dtype whose peak rate bounds the kernel: the workload model's "dtype" if it names one, else the
    dtype of the largest input buffer (``inputs``: (dtype, bytes) pairs)."""
    if model and model.get("dtype"):
        return str(model["dtype"])
    return max(inputs, key=lambda pair: pair[1])[0] if inputs else None


def described_buffers(ref: ReferenceModule, dims: dict[str, Any]) -> tuple[BufferMoved, ...]:
    """The buffers a reference's buffers() describes with a dtype and a shape, as profile.json records a
    bench's (for a report imported without a bench run); a buffer without a role is an input."""
    from kopt_core.bench.buffers import torch_dtype

    rows = []
    for name, desc in ref.describe_buffers(dims).items():
        if not (isinstance(desc, dict) and desc.get("dtype") and desc.get("shape")):
            continue
        shape = desc["shape"]
        elements = math.prod(shape) if isinstance(shape, (list, tuple)) else int(shape)
        dtype = str(desc["dtype"])
        rows.append(
            BufferMoved(
                name=str(name),
                dtype=dtype,
                role=str(desc.get("role", "input")),
                bytes=int(elements) * torch_dtype(dtype).itemsize,
            )
        )
    return tuple(rows)


def inputs_of(buffers: tuple[BufferMoved, ...]) -> list[tuple[str, int]]:
    """(dtype, bytes) of the buffers a kernel reads, for ``peak_dtype``."""
    return [(b.dtype, b.bytes) for b in buffers if b.role != "output"]


@attrs.frozen
class ImportContext:
    """What an imported report is read with besides itself, as a live profile has it: the reference's
    workload model, the buffers its buffers() describes, the dims, and the kernel's SASS listing."""

    model: dict[str, Any] | None = None
    buffers: tuple[BufferMoved, ...] = ()
    dims: dict[str, Any] | None = None
    sass: Path | None = None  # a cuobjdump -sass listing of the kernel's binary
    dtype: str | None = None  # the dtype whose peak bounds the kernel, when not read off the model or buffers

    @property
    def peak_dtype(self) -> str | None:
        return self.dtype or peak_dtype(self.model, inputs_of(self.buffers))


def reference_evidence(
    reference: str | Path | None,
    dims: dict[str, Any],
    sass: str | Path | None = None,
    buffers: tuple[BufferMoved, ...] | None = None,
) -> ImportContext:
    """What the reference file (and a SASS listing) give an imported report; an empty context without.
    ``buffers``: the kernel's own (``kernel_buffers``), else those the reference's buffers() describes."""
    if reference is None:
        return ImportContext(sass=Path(sass) if sass else None)
    ref = load_reference(reference)
    return ImportContext(
        model=ref.workload(dims),
        buffers=described_buffers(ref, dims) if buffers is None else buffers,
        dims=dict(dims),
        sass=Path(sass) if sass else None,
    )


def kernel_buffers(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    dims: dict[str, Any],
    *,
    backend: str | None = None,
) -> tuple[BufferMoved, ...]:
    """The buffers a bench of ``kernel`` realises (its interface, the reference's buffers() and kopt's
    sizing rule for those it leaves unsized), read statically: no build, no GPU."""
    from kopt_core.bench.buffers import plan_buffers, spec_bytes

    _, ref, _, report = static_report(pm, kernel, reference, dims, backend=backend)
    assert report.interface is not None  # check_candidate raises without one
    specs, _ = plan_buffers(report.interface, dims, ref)
    return tuple(
        BufferMoved(name=spec.name, dtype=spec.dtype, role=spec.role, bytes=spec_bytes(spec))
        for spec in specs
    )


def buffers_moved(bench: BenchResult) -> tuple[BufferMoved, ...]:
    """The solve's buffers as profile.json records them (for the default workload model and the kind of
    work)."""
    return tuple(BufferMoved(name=b.name, dtype=b.dtype, role=b.role, bytes=b.bytes) for b in bench.buffers)


def workload_used(
    model: dict[str, Any] | None,
    buffers: tuple[BufferMoved, ...],
    duration_ms: float | None,
    ceilings: Ceilings,
) -> WorkloadUsed | None:
    """The workload model a profile was measured against: the reference's, else kopt's default from the
    buffers (every input read once, every output written once, an in-out buffer both) with its memory
    floor; None when there is neither."""
    if model is not None:
        return WorkloadUsed(
            source="reference",
            bytes_min=float(model["bytes_min"]),
            flops=float(model["flops"]),
            note="the reference's workload_model",
        )
    bytes_min = default_bytes_min(buffers)
    if bytes_min is None:
        return None
    floor_ms, why = default_memory_floor(bytes_min, duration_ms, ceilings)
    return WorkloadUsed(source="buffers", bytes_min=float(bytes_min), floor_ms=floor_ms, note=why)


def _aggregate(report: ProfileReport) -> KernelProfile:
    """The report's aggregate kernel; the parsers raise before returning a report without kernels."""
    if report.aggregate is None:
        raise HardwareError(f"ncu report has no kernels: {report.source or 'the report'} lists none")
    return report.aggregate


def analyse(
    report: ProfileReport,
    out_dir: Path,
    options: ProfileOptions,
    *,
    bundle: str,
    bundle_reason: str,
    workload: dict[str, Any] | None,
    peak_dtype: str | None,
    prefix: str = "",
) -> tuple[NcuTop, Roofline]:
    """ncu_top.json, roofline.json and roofline.png (each after ``prefix``) from a parsed report (live or
    imported): the top ``options.ncu_num`` metrics per axis, the roofline against ``options.ceilings``.
    ``bundle`` and ``bundle_reason`` are the set the report was taken with and why."""
    registry = load_registry()
    kernel = _aggregate(report)
    resolved = resolve(registry, kernel)  # keyed by the registry's (unique) keys, in its order
    rows = [
        {**attrs.asdict(resolved[spec.key]), "axis": spec.axis, "bad_when": spec.bad_when}
        for spec in registry.metrics
    ]
    ncu_top = build_ncu_top(
        rows,
        ncu_num=options.ncu_num,
        bundle=bundle,
        bundle_reason=bundle_reason,
        duration_ms=kernel.duration_ms,
        kernels=len(report.kernels),
    )
    roofline = compute_roofline(
        metric_values(rows),
        duration_ms=kernel.duration_ms,
        workload=workload,
        ceilings=options.ceilings,
        peak_dtype=peak_dtype,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / f"{prefix}{NCU_TOP_FILE}", to_data(ncu_top))
    write_json(out_dir / f"{prefix}{ROOFLINE_FILE}", to_data(roofline))
    plot_roofline(roofline, out_dir / f"{prefix}{ROOFLINE_CHART}")
    return ncu_top, roofline


def _read_report(report_path: Path, out_dir: Path, name: str) -> ProfileReport:
    raw = runner.export_csv(report_path, "raw")
    write_text_atomic(out_dir / f"{name}.raw.csv", raw)
    parsed = parse_raw_csv(raw, source=str(report_path))
    details = runner.export_csv(report_path, "details")
    write_text_atomic(out_dir / f"{name}.details.csv", details)
    return attach_findings(parsed, parse_details_csv(details))


def kernel_rows(report: ProfileReport) -> tuple[ProfiledKernel, ...]:
    return tuple(
        ProfiledKernel(id=k.id, name=k.name, duration_ms=k.duration_ms, grid=k.grid, block=k.block)
        for k in report.kernels
    )


def keep_disassembly(pm: PluginManager, artifact: Artifact, path: Path) -> SassFile:
    """Write the artifact's SASS (the backend's ``kopt_disassemble``) to ``path``, for kernel traits and
    SASS verification later. Returns what profile.json records: the file, or why there is none."""
    from kopt_core.sass import SassToolError

    try:
        text = backend_hooks(pm, artifact.backend).disassemble(artifact)
    except SassToolError as error:
        return SassFile(error=str(error))
    write_text_atomic(path, text)
    return SassFile(file=path.name)


def profile_prepared(
    pm: PluginManager,
    prepared: Prepared,
    out_dir: str | Path,
    *,
    name: str = "kernel",
    options: ProfileOptions | None = None,
    bench: BenchResult | None = None,
    prefix: str = "",
) -> ProfileOutcome:
    """Profile a prepared kernel. ``options`` (default ``ProfileOptions()``) says how: the bundle (None:
    adaptive), ncu's time limits, the metrics kept per axis, the ceilings. ``bench`` is a BenchResult of
    it, if one was just measured (``kopt seed`` has one); otherwise a short check and timing runs first."""
    options = options or ProfileOptions()
    out_dir = Path(out_dir)
    started = time.perf_counter()
    bench = bench or run_bench(pm, prepared, QUICK)
    if not (bench.status == "ok" and bench.correctness_pass and bench.timing_valid):
        raise ValidationError(
            f"{prepared.candidate.path} failed validation, so it is not profiled: {bench.error}"
        )
    if bench.kernel_timing is None:  # the worker times every kernel whose timing is valid
        raise ValidationError(f"{prepared.candidate.path} has no kernel timing, so it is not profiled")
    harness_ms = bench.kernel_timing.median_ms
    request = prepared.request(QUICK)
    launch = backend_hooks(pm, prepared.backend.name).profile(prepared.artifact, request)
    request_path = out_dir / f"{name}.request.json"
    write_json(request_path, to_data(request))
    target = [sys.executable, "-m", "kopt_core.ncu.target", str(request_path)]
    report_path, bundle, reason, attempts = runner.profile(
        target,
        out_dir,
        launch=launch,
        options=options,
        name=name,
        duration_ms=harness_ms,
    )
    report = _read_report(report_path, out_dir, name)
    model = prepared.reference.workload(prepared.dims)
    ncu_top, roofline = analyse(
        report,
        out_dir,
        options,
        bundle=bundle,
        bundle_reason=reason,
        workload=model,
        peak_dtype=peak_dtype(model, inputs_of(buffers_moved(bench))),
        prefix=prefix,
    )
    ncu_ms = _aggregate(report).duration_ms
    sass = keep_disassembly(pm, prepared.artifact, out_dir / f"{name}{SASS_SUFFIX}")
    buffers = buffers_moved(bench)
    summary = ProfileSummary(
        report=str(report_path),
        bundle=bundle,
        bundle_reason=reason,
        kernels=kernel_rows(report),
        ncu_duration_ms=ncu_ms,
        kernel_file=prepared.candidate.path,
        backend=prepared.backend.name,
        dims=prepared.dims,
        attempts=attempts,
        harness_median_ms=harness_ms,
        harness_over_ncu=(harness_ms / ncu_ms - 1) if ncu_ms else None,
        ncu_seconds=sum(a.seconds for a in attempts),
        sass=sass,
        total_seconds=time.perf_counter() - started,
        buffers=buffers,
        workload=workload_used(model, buffers, ncu_ms, options.ceilings),
    )
    write_json(out_dir / f"{prefix}{PROFILE_FILE}", to_data(summary))
    return ProfileOutcome(out_dir=out_dir, report=report, ncu_top=ncu_top, roofline=roofline, summary=summary)


def import_profile(
    path: str | Path,
    out_dir: str | Path,
    *,
    options: ProfileOptions | None = None,
    context: ImportContext | None = None,
) -> ProfileOutcome:
    """The same outputs from an existing ``.ncu-rep`` (needs ncu) or a raw-page CSV export (needs
    neither ncu nor a GPU). Of ``options`` only ``ncu_num`` and ``ceilings`` apply: ncu does not run.

    With the reference's ``context`` (its workload model, buffers and dims) and the kernel's SASS, the
    outputs are those a live profile of the same report writes: the bundle is read off the report's
    metrics, profile.json records the buffers, dims, workload model and SASS listing. A raw CSV that a
    kopt profile wrote (``NAME.raw.csv``) is read with the files it wrote beside it, NAME.details.csv
    (ncu's rule findings) and NAME.sass, unless ``context`` names another listing."""
    options = options or ProfileOptions()
    context = context or ImportContext()
    path, out_dir = Path(path), Path(out_dir)
    from kopt_core.ncu.parse import parse_imported_csv

    if not path.is_file():
        raise ConfigError(f"profile {path} does not exist")
    stem = path.name.removesuffix(".csv").removesuffix(".raw") if path.suffix == ".csv" else path.stem
    if path.suffix == runner.REPORT_SUFFIX:
        out_dir.mkdir(parents=True, exist_ok=True)
        report = _read_report(path, out_dir, path.stem)
    elif path.suffix == ".csv":  # a file the user gives: not a raw page is bad input (exit 4)
        report = parse_imported_csv(path.read_text(errors="replace"), source=str(path))
        details = path.with_name(f"{stem}.details.csv")
        if path.name.endswith(".raw.csv") and details.is_file():
            report = attach_findings(report, parse_details_csv(details.read_text(errors="replace")))
        out_dir.mkdir(parents=True, exist_ok=True)
    else:
        raise ConfigError(f"{path}: import takes an .ncu-rep report or a CSV of its raw page")
    bundle = runner.bundle_collected(_aggregate(report).metrics)
    reason = f"imported from {path.name} (its metrics are the {bundle} bundle's)"
    ncu_top, roofline = analyse(
        report,
        out_dir,
        options,
        bundle=bundle,
        bundle_reason=reason,
        workload=context.model,
        peak_dtype=context.peak_dtype,
    )
    duration_ms = _aggregate(report).duration_ms
    summary = ProfileSummary(
        report=str(path),
        bundle=bundle,
        bundle_reason=reason,
        kernels=kernel_rows(report),
        ncu_duration_ms=duration_ms,
        dims=context.dims,
        sass=_imported_sass(context.sass or path.with_name(f"{stem}{SASS_SUFFIX}"), out_dir, stem),
        buffers=context.buffers,
        # a reference's workload, given with its dims (reference_evidence); a bare model is the roofline's
        workload=workload_used(context.model, context.buffers, duration_ms, options.ceilings)
        if context.dims is not None
        else None,
    )
    write_json(out_dir / PROFILE_FILE, to_data(summary))
    return ProfileOutcome(out_dir=out_dir, report=report, ncu_top=ncu_top, roofline=roofline, summary=summary)


def _imported_sass(listing: Path, out_dir: Path, stem: str) -> SassFile:
    """The SASS listing an imported report is read with, copied into ``out_dir`` as ``<stem>.sass``; or
    why there is none (a report carries no listing of its own)."""
    if not listing.is_file():
        return SassFile(
            error=f"an imported report carries no SASS listing and {listing} does not exist: give --sass "
            "FILE (cuobjdump -sass of the kernel's binary) for the kernel's traits"
        )
    target = out_dir / f"{stem}{SASS_SUFFIX}"
    if listing.resolve() != target.resolve():
        write_text_atomic(target, listing.read_text(errors="replace"))
    return SassFile(file=target.name)


def profile_standalone(
    kernel: str | Path | None,
    reference: str | Path | None,
    dims: dict[str, Any],
    *,
    import_path: str | Path | None = None,
    sass: str | Path | None = None,
    out_dir: str | Path | None = None,
    backend: str | None = None,
    arch: str | None = None,
    options: ProfileOptions | None = None,
    on_warning: Callable[[str], None] | None = None,
    pm: PluginManager | None = None,
) -> ProfileOutcome:
    """``kopt profile KERNEL --ref REF`` (check, time, then profile) or ``kopt profile --import FILE``
    (analyse an existing report; the reference, if given, supplies the workload model, the buffers and
    the dims, ``kernel`` with it the buffers exactly as its bench realised them, and ``sass`` the
    kernel's SASS listing: what a live profile has). ``options``
    (default ``ProfileOptions()``) is how ncu runs and what the report is read against. The output
    folder defaults to ``./kopt_profile_<stem>``; ``pm`` is loaded only when a kernel is profiled."""
    options = options or ProfileOptions()
    if import_path:
        buffers = None
        if kernel and reference:  # the kernel's buffers, as its bench realised them
            if pm is None:
                from kopt_core.plugins import get_plugin_manager

                pm = get_plugin_manager()
            buffers = kernel_buffers(pm, kernel, reference, dims, backend=backend)
        return import_profile(
            import_path,
            Path(out_dir or f"kopt_profile_{Path(import_path).stem}"),
            options=options,
            context=reference_evidence(reference, dims, sass, buffers),
        )
    if not kernel or not reference:
        raise ConfigError("kopt profile needs KERNEL and --ref (or --import FILE)")
    if pm is None:
        from kopt_core.plugins import get_plugin_manager

        pm = get_plugin_manager()
    prepared = prepare(
        pm, kernel, reference, dims, backend=backend, arch=arch, on_warning=on_warning, purpose="profile it"
    )
    return profile_prepared(
        pm,
        prepared,
        Path(out_dir or f"kopt_profile_{Path(kernel).stem}"),
        options=options,
    )


def profile_document(outcome: ProfileOutcome) -> dict[str, Any]:
    """``kopt profile --json``'s result: profile.json with the roofline and the output folder."""
    return {
        **to_data(outcome.summary),
        "roofline": to_data(outcome.roofline),
        "out_dir": str(outcome.out_dir),
    }

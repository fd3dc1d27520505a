"""``kopt bench``: check one kernel against its reference and time both, honestly.

Order matters for exit codes: static checks first (a bad file is exit 4 even without a GPU), then the
toolchain and the build, then the GPU (a valid kernel on a machine without one is exit 3).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kopt_core.backends import BackendRegistry, backend_hooks
from kopt_core.contract import check_contract
from kopt_core.errors import (
    EXIT_CONFIG,
    EXIT_HARDWARE,
    EXIT_INVALID_KERNEL,
    EXIT_OK,
    ConfigError,
    HardwareError,
    KoptError,
    ValidationError,
)
from kopt_core.hardware import DEFAULT_ARCH, GpuInfo, arch_for_capability, detect_gpus
from kopt_core.jsonio import write_json
from kopt_core.records import (
    Artifact,
    BackendInfo,
    BenchOptions,
    BenchRequest,
    BenchResult,
    Candidate,
    PreflightReport,
    Toolchain,
    Workload,
    to_data,
)
from kopt_core.reference import ReferenceModule, load_reference

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager


def check_candidate(
    pm: PluginManager, candidate: Candidate, dims: dict[str, Any], ref: ReferenceModule
) -> PreflightReport:
    """One candidate's static contract: its backend's ``kopt_preflight``, then the core's checks (dims,
    reference, buffers). Raises ConfigError with what the user must fix."""
    report = backend_hooks(pm, candidate.backend).preflight(candidate, dims, ref)
    if report.problems:
        raise ConfigError(f"{candidate.path}: " + "; ".join(report.problems))
    if report.interface is None:
        raise ConfigError(
            f"{candidate.path}: the {candidate.backend} backend's kopt_preflight reported no problem but "
            "no kernel interface",
            hint="its plugin is broken: a preflight without problems must return the parsed interface",
        )
    warnings = check_contract(report.interface, ref, dims)
    return PreflightReport(
        backend=report.backend, interface=report.interface, warnings=tuple(report.warnings) + tuple(warnings)
    )


@attrs.frozen
class Prepared:
    """A kernel that passed its static checks and built, on a machine that can run it."""

    backend: BackendInfo
    reference: ReferenceModule
    reference_path: str
    candidate: Candidate
    artifact: Artifact
    dims: dict[str, Any]

    def request(self, options: BenchOptions) -> BenchRequest:
        """What a worker needs to check and time this kernel with ``options``."""
        return BenchRequest(
            artifact=self.artifact, reference=self.reference_path, dims=self.dims, options=options
        )


def static_contract(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    dims: dict[str, Any],
    *,
    backend: str | None = None,
    on_warning: Callable[[str], None] | None = None,
    what: str = "kernel",
) -> tuple[BackendInfo, ReferenceModule, Candidate]:
    """The file exists, its backend is known, the reference loads, and the contract holds: no GPU, no
    build. Warnings go to ``on_warning``."""
    info, ref, candidate, _ = static_report(
        pm, kernel, reference, dims, backend=backend, on_warning=on_warning, what=what
    )
    return info, ref, candidate


def static_report(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    dims: dict[str, Any],
    *,
    backend: str | None = None,
    on_warning: Callable[[str], None] | None = None,
    what: str = "kernel",
) -> tuple[BackendInfo, ReferenceModule, Candidate, PreflightReport]:
    """``static_contract`` with the preflight's report (the kernel's parsed interface) beside it."""
    path = Path(kernel)
    if not path.is_file():
        if path.exists():  # a folder, /dev/null, a pipe: there, but not a file kopt can read as source
            kind = "a folder" if path.is_dir() else "not a regular file"
            raise ConfigError(f"{what} file {path} is {kind}", hint="pass the path of your .cu or .py kernel")
        raise ConfigError(
            f"{what} file {path} does not exist", hint="pass the path of your .cu or .py kernel"
        )
    registry = BackendRegistry.from_plugins(pm)
    info = registry.get(backend) if backend else registry.detect(path)
    ref = load_reference(reference)
    candidate = Candidate(path=str(path.resolve()), backend=info.name, name=path.stem)
    report = check_candidate(pm, candidate, dict(dims), ref)
    for warning in report.warnings:
        if on_warning:
            on_warning(warning)
    return info, ref, candidate, report


def prepare(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    dims: dict[str, Any],
    *,
    backend: str | None = None,
    arch: str | None = None,
    on_warning: Callable[[str], None] | None = None,
    purpose: str = "check and time it",
    require_gpu: bool = True,
) -> Prepared:
    """Static checks, toolchain, build, GPU: everything before a worker runs. Raises KoptError (exit 4
    for what the user must fix in their files, 3 for the machine). ``require_gpu=False`` stops after the
    build (the static contract, which needs no GPU)."""
    info, ref, candidate = static_contract(
        pm, kernel, reference, dims, backend=backend, on_warning=on_warning
    )
    path = Path(candidate.path)
    hooks = backend_hooks(pm, info.name)
    probe = hooks.probe()
    if not probe.available:
        raise HardwareError(f"the {info.name} backend cannot run here: {probe.reason}")
    gpus, no_gpu = detect_gpus() if info.needs_gpu else ([], "")
    arch = arch or target_arch(info, gpus)
    with tempfile.TemporaryDirectory(
        prefix="kopt-build-"
    ) as scratch:  # backends keep artifacts in their caches
        artifact = hooks.compile(candidate, Path(scratch), Toolchain(arch=arch))
    if info.needs_gpu and not gpus and require_gpu:
        raise HardwareError(
            f"no GPU: {no_gpu}. {path.name} passed its contract checks and builds for {arch}; run kopt "
            f"on a machine with an NVIDIA GPU to {purpose}"
        )
    return Prepared(
        backend=info,
        reference=ref,
        reference_path=str(Path(reference).resolve()),
        candidate=candidate,
        artifact=artifact,
        dims=dict(dims),
    )


def target_arch(info: BackendInfo, gpus: list[GpuInfo] | None = None) -> str:
    """The architecture to build for: the first GPU's, else kopt's default (a build without a GPU checks
    the contract for the H200)."""
    if gpus is None:
        gpus = detect_gpus()[0] if info.needs_gpu else []
    return arch_for_capability(gpus[0].capability) if gpus else DEFAULT_ARCH


@attrs.frozen
class PreflightOutcome:
    """What ``kopt preflight`` checked: the backend it was checked for (named or detected), the
    architecture the kernel was built for, and the check in words (``summary``)."""

    summary: str
    backend: str
    arch: str

    def __str__(self) -> str:
        return self.summary


def preflight_checked(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    dims: dict[str, Any],
    *,
    backend: str | None = None,
    arch: str | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> PreflightOutcome:
    """The contract holds and the kernel builds: the backend and architecture it was checked for, and the
    check in words."""
    prepared = prepare(
        pm, kernel, reference, dims, backend=backend, arch=arch, on_warning=on_warning, require_gpu=False
    )
    artifact = prepared.artifact
    built_for = artifact.arch or arch or ""
    summary = (
        f"{prepared.candidate.path} ({prepared.backend.name}): contract holds with "
        f"{', '.join(f'{k}={v}' for k, v in dims.items())}; built for {built_for or 'its target'}"
    )
    return PreflightOutcome(summary=summary, backend=prepared.backend.name, arch=built_for)


def preflight_kernel(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    dims: dict[str, Any],
    *,
    backend: str | None = None,
    arch: str | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> str:
    """``kopt preflight``: the contract holds and the kernel builds. Returns what was checked, in words
    (``preflight_checked`` returns the backend and architecture too)."""
    return preflight_checked(
        pm, kernel, reference, dims, backend=backend, arch=arch, on_warning=on_warning
    ).summary


def run_bench(pm: PluginManager, prepared: Prepared, options: BenchOptions) -> BenchResult:
    """Check and time a prepared kernel in a worker; add the workload's rates."""
    result = backend_hooks(pm, prepared.backend.name).bench(prepared.request(options))
    return attrs.evolve(result, workload=workload(prepared.reference, prepared.dims, result))


def bench_kernel(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    dims: dict[str, Any],
    *,
    backend: str | None = None,
    options: BenchOptions | None = None,
    arch: str | None = None,
    on_warning: Callable[[str], None] | None = None,
    out: str | Path | None = None,
) -> BenchResult:
    """Preflight, build, check and time ``kernel`` against ``reference``; with ``out``, write bench.json
    there. Raises KoptError for what the user must fix; returns a BenchResult (possibly failed) once a
    worker ran."""
    prepared = prepare(pm, kernel, reference, dims, backend=backend, arch=arch, on_warning=on_warning)
    result = run_bench(pm, prepared, options or BenchOptions())
    if out:
        write_json(out, to_data(result))
    return result


def workload(ref: ReferenceModule, dims: dict[str, Any], result: BenchResult) -> Workload | None:
    """The rates the kernel's median reaches, when the reference has a workload_model."""
    model = ref.workload(dims)
    if model is None:
        return None
    flops, moved = float(model["flops"]), float(model["bytes_min"])
    timing = result.kernel_timing
    if timing is None or not timing.median_ms > 0:
        return Workload(flops=flops, bytes_min=moved)
    seconds = timing.median_ms / 1e3
    return Workload(
        flops=flops, bytes_min=moved, tflops=flops / seconds / 1e12, tbytes_per_s=moved / seconds / 1e12
    )


def exit_code(result: BenchResult) -> int:
    """0 correct and timed; 2 the kernel failed; 3 no device in the worker; 4 the reference is at fault."""
    if result.status == "ok" and result.correctness_pass and result.timing_valid:
        return EXIT_OK
    if result.status == "error" and result.error_stage == "device":
        return EXIT_HARDWARE
    if result.status == "error" and result.error_stage == "reference":
        return EXIT_CONFIG
    return EXIT_INVALID_KERNEL


# ------------------------------------------------------------------------------------ the bench command

# The error a bench that ran but did not pass reports, by its exit code (the --json envelope's error type).
_FAILURE_FOR_EXIT: dict[int, type[KoptError]] = {
    EXIT_INVALID_KERNEL: ValidationError,
    EXIT_HARDWARE: HardwareError,
    EXIT_CONFIG: ConfigError,
}


@attrs.frozen
class BenchOutcome:
    """What ``kopt bench`` ends with: the result (bench.json, also when nothing could be measured) and,
    when the kernel did not pass, why: ``failure``, whose exit code is the command's."""

    result: BenchResult
    failure: KoptError | None = None
    measured: bool = True  # False: it stopped before a worker ran (no GPU, the backend cannot run here)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.failure is None else self.failure.exit_code


def failure_of(result: BenchResult) -> KoptError | None:
    """Why ``result`` did not pass (its ``exit_code``), in words; None when it passed."""
    code = exit_code(result)
    if code == EXIT_OK:
        return None
    message = result.error or f"the kernel did not pass (status {result.status})"
    return _FAILURE_FOR_EXIT.get(code, KoptError)(message)


def device_error_result(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    backend: str | None,
    dims: dict[str, Any],
    options: BenchOptions,
    exc: KoptError,
) -> BenchResult:
    """bench.json for a bench that stopped before its worker: status error, stage device."""
    from datetime import datetime, timezone

    from kopt_core import __version__

    if not backend:
        try:
            backend = BackendRegistry.from_plugins(pm).detect(kernel).name
        except KoptError:
            backend = ""
    return BenchResult(
        kernel=str(Path(kernel).resolve()),
        backend=backend,
        status="error",
        error=str(exc),
        error_stage="device",
        reference_file=str(Path(reference).resolve()),
        dims=dict(dims),
        options=options,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        kopt_version=__version__,
    )


def bench_outcome(
    pm: PluginManager,
    kernel: str | Path,
    reference: str | Path,
    dims: dict[str, Any],
    *,
    backend: str | None = None,
    options: BenchOptions | None = None,
    arch: str | None = None,
    on_warning: Callable[[str], None] | None = None,
    out: str | Path | None = None,
) -> BenchOutcome:
    """``kopt bench``: ``bench_kernel`` and its exit code. A HardwareError before a worker ran (no GPU,
    the backend cannot run here; exit 3) comes after the contract was checked, so it still ends with a
    result, one that says why nothing was measured, written to ``out`` as any bench.json. Raises
    KoptError for what the user must fix."""
    options = options or BenchOptions()
    try:
        result = bench_kernel(
            pm,
            kernel,
            reference,
            dims,
            backend=backend,
            options=options,
            arch=arch,
            on_warning=on_warning,
            out=out,
        )
    except HardwareError as exc:
        failed = device_error_result(pm, kernel, reference, backend, dims, options, exc)
        if out:
            write_json(out, to_data(failed))
        return BenchOutcome(result=failed, failure=exc, measured=False)
    return BenchOutcome(result=result, failure=failure_of(result))


# A kernel's check and timing, where kopt keeps one beside the kernel: a search's trials here, and in a run
# beside the baseline, every branch and ablation (kopt_core.run.layout names it for the run).
BENCH_FILE = "bench.json"

PREFLIGHT_CHECKS = ("kernel contract", "reference", "dims", "build")


def preflight_document(
    kernel: str | Path, reference: str | Path, dims: dict[str, Any], outcome: PreflightOutcome
) -> dict[str, Any]:
    """``kopt preflight --json``'s result: what was checked, of which kernel, for which backend and
    architecture (those ``preflight_checked`` checked for: detected and chosen when the command line named
    none; arch null for a backend that builds for no GPU architecture), and the check in words."""
    return {
        "kernel": str(Path(kernel).resolve()),
        "reference": str(Path(reference).resolve()),
        "dims": dims,
        "backend": outcome.backend,
        "arch": outcome.arch or None,
        "checks": list(PREFLIGHT_CHECKS),
        "summary": outcome.summary,
    }

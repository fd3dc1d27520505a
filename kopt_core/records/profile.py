"""What Nsight Compute measured, as kopt reads it (ncu CSV pages, normalised units), what a profile
wrote about itself (profile.json), and how a profile is taken and read (``ProfileOptions``)."""

from __future__ import annotations

import os
from typing import Any

from attrs import field, frozen, validators

from kopt_core.records.fields import as_tuple
from kopt_core.records.roofline import DEFAULT_CEILINGS, Ceilings
from kopt_core.records.versions import PROFILE_SCHEMA_VERSION, read_document

BUNDLES = ("full", "light")  # ncu's metric bundles (references/metric_registry.json)


@frozen
class MetricValue:
    """One metric of one kernel. ``value`` is in ``unit`` after normalisation (times in ms, sizes in
    bytes, rates in bytes/second, frequencies in Hz, percentages in %); None when ncu printed no number."""

    name: str  # the ncu metric name, e.g. "gpu__time_duration.sum"
    value: float | None
    unit: str
    raw: str = ""  # the text ncu printed
    raw_unit: str = ""


@frozen
class RuleFinding:
    """A finding of ncu's own rules (details page): what it suggests and why."""

    section: str
    rule: str
    kind: str  # OPT | WRN | INF | ...
    message: str
    estimated_speedup_pct: float | None = None


@frozen
class KernelProfile:
    """One profiled kernel launch (or the duration-weighted aggregate of several)."""

    id: int
    name: str
    duration_ms: float | None = None
    grid: str = ""
    block: str = ""
    metrics: dict[str, MetricValue] = field(factory=dict)  # ncu metric name -> MetricValue
    findings: tuple[RuleFinding, ...] = field(default=(), converter=as_tuple)


@frozen
class ProfileReport:
    """Every kernel in the profiled range and their aggregate."""

    kernels: tuple[KernelProfile, ...] = field(converter=as_tuple)
    aggregate: KernelProfile | None = None  # None when there are no kernels
    source: str = ""  # the file or command the CSV came from


@frozen
class ProfileLaunch:
    """How Nsight Compute should run a backend's artifact (the answer of ``kopt_profile``)."""

    kernel_filter: str | None = None  # an ncu --kernel-name value ("regex:..."); None keeps every kernel
    env: dict[str, str] = field(factory=dict)  # extra environment for the profiled process


@frozen
class ProfileOptions:
    """How a profile is taken and read, the same for every kernel of a command or a run: how ncu runs
    (the bundle, the time limits) and what the report is read against (the metrics kept per axis, the
    device ceilings). The kernel's own side (filter, environment) is the backend's ``ProfileLaunch``."""

    ncu_num: int = 5  # top metrics per axis in ncu_top.json
    # the metric bundle, full | light; None: adaptive (full below 10 ms of kernel time, light above)
    bundle: str | None = field(default=None, validator=validators.optional(validators.in_(BUNDLES)))
    ncu_timeout_s: float = 600.0  # the limit for one ncu run
    full_timeout_s: float | None = None  # the limit for a full-set run (None: ncu_timeout_s); then light
    ceilings: Ceilings = DEFAULT_CEILINGS  # the default: the built-in H200 figures


@frozen
class NcuAttempt:
    """One run of ncu: what was asked, what happened, where its log is."""

    command: tuple[str, ...] = field(converter=as_tuple)
    bundle: str  # full | light
    reason: str  # why this bundle
    returncode: int | None
    timed_out: bool
    seconds: float
    log: str  # path of the captured stdout/stderr


@frozen
class ProfiledKernel:
    """One kernel of a profile as profile.json lists it."""

    id: int
    name: str
    duration_ms: float | None = None
    grid: str = ""
    block: str = ""


@frozen
class SassFile:
    """The SASS listing a profile kept beside its report (a file name in the same folder), or why none."""

    file: str | None = None
    error: str | None = None


@frozen
class BufferMoved:
    """One buffer of the profiled solve as the bench realised it: its dtype, role and size."""

    name: str
    dtype: str
    role: str  # input | output | inout
    bytes: int


@frozen
class WorkloadUsed:
    """The workload model a profile measured the kernel against: the reference's ``workload_model``, or
    kopt's default when the reference has none (``source`` "buffers": every input read once, every
    output written once; bytes only, no flops), with its memory floor on the profile's ceilings."""

    source: str  # reference | buffers
    bytes_min: float | None
    flops: float | None = None
    floor_ms: float | None = None  # the default model's memory floor; None when it does not apply
    note: str = ""


@frozen
class ProfileSummary:
    """profile.json: what one profile ran and found. A profile imported from an existing report has no
    kernel file, harness timing, ncu attempts or SASS: those fields stay unknown (None)."""

    report: str  # the .ncu-rep (or the imported CSV)
    bundle: str  # full | light (an import: the bundle its metrics are; "imported" in older files)
    bundle_reason: str
    kernels: tuple[ProfiledKernel, ...] = field(converter=as_tuple)
    ncu_duration_ms: float | None
    kernel_file: str | None = None
    backend: str | None = None
    dims: dict[str, Any] | None = None
    attempts: tuple[NcuAttempt, ...] = field(default=(), converter=as_tuple)
    harness_median_ms: float | None = None
    harness_over_ncu: float | None = None  # harness median / ncu duration - 1
    ncu_seconds: float | None = None
    sass: SassFile | None = None
    total_seconds: float | None = None
    buffers: tuple[BufferMoved, ...] = field(default=(), converter=as_tuple)  # empty when not recorded
    workload: WorkloadUsed | None = None
    schema_version: int = PROFILE_SCHEMA_VERSION


def read_profile_summary(path: str | os.PathLike[str]) -> ProfileSummary:
    """A profile.json; OSError or ValueError when it cannot be read as one."""
    return read_document(path, ProfileSummary, "profile")
